/* test_cuda_model.c: test_cuda's whole-model tests (test_cuda.c holds the tolerances, the
 * helpers, the op twins and the suite; tests/meson.build builds both files twice). */
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
#include "testutil_llama.h"

/* ---- whole model -------------------------------------------------------------- */

/* the HF reference fixtures: tests/fixtures.h */
#define N_FIXTURES RC_N_FIXTURE_MODELS

/* Full forward of the fixture's sequences on the backend under test vs HF
 * fp32 (same limit as the CPU: 1e-5), and cached greedy decode of the same
 * tokens vs that full forward. Loop index: fixture * 2 + kernels. */
START_TEST(test_fixture_vs_hf)
{
    const char *name = rc_fixture_models[_i / 2].name;
    const rc_kernels kern = _i % 2 ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE;
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    char *rp = rc_path_join(dir, "reference.safetensors");
    rc_safetensors *ref;
    ck_assert_msg(rc_st_open_file(rp, &ref) == RC_OK, "%s", rc_last_error());
    const rc_st_tensor *tt = rc_st_find(ref, "tokens");
    ck_assert(tt != NULL);
    const int64_t B = tt->shape[0], T = tt->shape[1], V = m->cfg.vocab;
    int32_t *tokens = malloc(sizeof(int32_t) * B * T), *lengths = malloc(sizeof(int32_t) * B);
    float *fwd32 = malloc(sizeof(float) * B * T * V);
    ck_assert(rc_st_read_i32(ref, "tokens", 2, (int64_t[]){B, T}, tokens) == RC_OK);
    ck_assert(rc_st_read_i32(ref, "lengths", 1, (int64_t[]){B}, lengths) == RC_OK);
    rc_test_read_rows(ref, "forward_logprobs_f32", lengths, B, T, V, false, fwd32);
    int64_t lens[64], total = 0;
    for (int64_t b = 0; b < B; b++)
        total += lens[b] = lengths[b];
    int32_t *tok = malloc(sizeof(int32_t) * total);
    for (int64_t b = 0, o = 0; b < B; b++)
        for (int64_t t = 0; t < lens[b]; t++)
            tok[o++] = tokens[b * T + t];
    rc_backend *be;
    ck_assert_msg(test_backend_create(kern, &be) == RC_OK, "%s", rc_last_error());
    rc_numerics num = rc_numerics_fp32();
    rc_engine *e;
    ck_assert_msg(rc_engine_create(m, be, &num, B, T, total, &e) == RC_OK, "%s", rc_last_error());
    float *out = malloc(sizeof(float) * total * V);
    ck_assert_msg(rc_full_forward(e, tok, lens, B, out) == RC_OK, "%s", rc_last_error());
    double d32 = 0;
    for (int64_t b = 0, o = 0; b < B; b++)
        for (int64_t t = 0; t < lens[b]; t++, o++)
            for (int64_t v = 0; v < V; v++) {
                double dd = fabs((double)out[o * V + v] - (double)fwd32[(b * T + t) * V + v]);
                d32 = dd > d32 ? dd : d32;
            }
    /* the CPU backend, same kernel strategy, same tokens */
    rc_backend *cpu;
    ck_assert(rc_backend_cpu_create(0, kern, &cpu) == RC_OK);
    rc_engine *ec;
    ck_assert(rc_engine_create(m, cpu, &num, B, T, total, &ec) == RC_OK);
    float *cout = malloc(sizeof(float) * total * V);
    ck_assert(rc_full_forward(ec, tok, lens, B, cout) == RC_OK);
    double dcpu = 0;
    for (int64_t i = 0; i < total * V; i++) {
        double dd = fabs((double)cout[i] - (double)out[i]);
        dcpu = dd > dcpu ? dd : dcpu;
    }
    rc_engine_free(ec);
    rc_backend_destroy(cpu);
    free(cout);
    /* cached decode: every sequence token by token, all sequences per step */
    float *dec = malloc(sizeof(float) * total * V);
    rc_engine *e2;
    ck_assert(rc_engine_create(m, be, &num, B, T, total, &e2) == RC_OK);
    int64_t maxlen = 0;
    for (int64_t b = 0; b < B; b++)
        maxlen = lens[b] > maxlen ? lens[b] : maxlen;
    int64_t off[64];
    for (int64_t b = 0, o = 0; b < B; o += lens[b], b++)
        off[b] = o;
    for (int64_t t = 0; t < maxlen; t++) {
        int64_t slots[64], starts[64], n_new[64], rows[64], nb = 0;
        int32_t stok[64];
        for (int64_t b = 0; b < B; b++)
            if (t < lens[b]) {
                slots[nb] = b, starts[nb] = t, n_new[nb] = 1, rows[nb] = nb;
                stok[nb] = tok[off[b] + t];
                nb++;
            }
        float *lp = malloc(sizeof(float) * nb * V);
        ck_assert_msg(rc_engine_step(e2, slots, starts, n_new, nb, stok, rows, nb, lp, NULL, NULL) == RC_OK, "%s",
                      rc_last_error());
        for (int64_t i = 0; i < nb; i++)
            memcpy(dec + (off[slots[i]] + t) * V, lp + i * V, sizeof(float) * V);
        free(lp);
    }
    double dc = 0;
    int64_t same_bits = 0;
    for (int64_t i = 0; i < total * V; i++) {
        double dd = fabs((double)dec[i] - (double)out[i]);
        dc = dd > dc ? dd : dc;
        same_bits += memcmp(&dec[i], &out[i], sizeof(float)) == 0;
    }
    printf("%-10s %-16s %-9s full forward vs HF fp32 max|dlogp| %.3e, vs CPU %.3e; cached decode vs full forward "
           "%.3e (%lld of %lld bitwise equal)\n",
           TEST_NAME, name, rc_kernels_name(kern), d32, dcpu, dc, (long long)same_bits, (long long)(total * V));
    /* 1e-5: tests/test_forward.c's fp32 bound for the CPU backend on the same fixtures */
    printf("%-10s %-16s %-9s measured max %.3e bound %.3e (fp32 full forward vs HF fp32)\n", TEST_NAME, name,
           rc_kernels_name(kern), d32, 1e-5);
#ifdef RC_TEST_EMULATE
    /* same code, same compiler, fixed order: bitwise under invariant */
    const double dcpu_bound = kern == RC_KERNELS_INVARIANT ? 0.0 : 1e-5;
#else
    const double dcpu_bound = 1e-5;
#endif
    printf("%-10s %-16s %-9s measured max %.3e bound %.3e (fp32 full forward vs the CPU backend)\n", TEST_NAME, name,
           rc_kernels_name(kern), dcpu, dcpu_bound);
    ck_assert_msg(d32 <= 1e-5, "%s: full forward vs HF fp32 differs by %g", name, d32);
    ck_assert_msg(dcpu <= dcpu_bound, "%s: full forward vs the CPU backend differs by %g > %g", name, dcpu,
                  dcpu_bound);
    if (kern == RC_KERNELS_INVARIANT)
        ck_assert_msg(same_bits == total * V, "%s: invariant decode vs full forward not bitwise (max %g)", name, dc);
    else
        ck_assert_msg(dc <= 1e-5, "%s: cached decode vs full forward differs by %g", name, dc);
    rc_engine_free(e);
    rc_engine_free(e2);
    rc_backend_destroy(be);
    rc_model_free(m);
    rc_st_close(ref);
    free(rp), free(tokens), free(lengths), free(fwd32), free(tok), free(out), free(dec);
}
END_TEST

/* the two sequences of the twin tests (7 and 5 tokens, packed) */
static const int32_t k_twin_tok[12] = {1, 5, 9, 2, 7, 3, 11, 4, 6, 8, 10, 12};
static const int64_t k_twin_lens[2] = {7, 5};

/* The twin sequences of model m under num, invariant kernels: the full
 * forward on this backend (out[0]) and on the CPU (out[1]), and the cached
 * decode on this backend, both sequences one token per step (dec); each
 * [12][vocab], malloc'd (twin_free). dcpu: max |out[0] - out[1]|; same: how
 * many decode values equal out[0]'s bit for bit. */
typedef struct {
    float *out[2], *dec;
    double dcpu;
    int64_t same;
} twin_result;

static void twin_free(twin_result *r)
{
    free(r->out[0]);
    free(r->out[1]);
    free(r->dec);
}

static twin_result twin_runs(const rc_model *m, const rc_numerics *num)
{
    twin_result r = {{NULL, NULL}, NULL, 0, 0};
    float **out = r.out, **dec = &r.dec;
    double *dcpu = &r.dcpu;
    int64_t *same = &r.same;
    const int64_t V = m->cfg.vocab;
    rc_backend *be[2];
    ck_assert_msg(test_backend_create(RC_KERNELS_INVARIANT, &be[0]) == RC_OK, "%s", rc_last_error());
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &be[1]) == RC_OK);
    for (int k = 0; k < 2; k++) {
        rc_engine *e;
        ck_assert_msg(rc_engine_create(m, be[k], num, 2, 16, 32, &e) == RC_OK, "%s", rc_last_error());
        out[k] = malloc(sizeof(float) * 12 * V);
        ck_assert_msg(rc_full_forward(e, k_twin_tok, k_twin_lens, 2, out[k]) == RC_OK, "%s", rc_last_error());
        rc_engine_free(e);
    }
    *dec = malloc(sizeof(float) * 12 * V);
    rc_engine *e2;
    ck_assert(rc_engine_create(m, be[0], num, 2, 16, 32, &e2) == RC_OK);
    for (int64_t t = 0; t < 7; t++) {
        int64_t slots[2], starts[2], n_new[2], rows[2], nb = 0, off[2] = {0, 7};
        int32_t stok[2];
        float lp[2 * 512];
        ck_assert(V <= 512);
        for (int64_t b = 0; b < 2; b++)
            if (t < k_twin_lens[b]) {
                slots[nb] = b, starts[nb] = t, n_new[nb] = 1, rows[nb] = nb;
                stok[nb] = k_twin_tok[off[b] + t];
                nb++;
            }
        ck_assert_msg(rc_engine_step(e2, slots, starts, n_new, nb, stok, rows, nb, lp, NULL, NULL) == RC_OK, "%s",
                      rc_last_error());
        for (int64_t i = 0; i < nb; i++)
            memcpy(*dec + (off[slots[i]] + t) * V, lp + i * V, sizeof(float) * V);
    }
    rc_engine_free(e2);
    *dcpu = 0;
    *same = 0;
    for (int64_t i = 0; i < 12 * V; i++) {
        const double d = fabs((double)out[0][i] - (double)out[1][i]);
        *dcpu = d > *dcpu ? d : *dcpu;
        *same += memcmp(&(*dec)[i], &out[0][i], sizeof(float)) == 0;
    }
    rc_backend_destroy(be[0]);
    rc_backend_destroy(be[1]);
    return r;
}

/* The whole-model bound of a twin: bitwise in the host build (same code,
 * fixed order). On a GPU the invariant kernels differ from the CPU's only
 * where CUDA's math library rounds an fp32 expf / erff / logf differently,
 * a last-bit flip of an intermediate that the bf16 roundings carry to the
 * log-probs: some of the roundings the bf16 dtype makes anyway. The bound is
 * the whole bf16 rounding's effect on the same model and tokens, measured on
 * the CPU: max |bf16 forward - fp32 forward| with invariant kernels, the
 * twin's numerics but plain weights (the fp8 weights are the same on both
 * sides). To be measured on a GPU. */
static double twin_bound(const rc_model *m, const rc_numerics *num, const char **why)
{
#ifdef RC_TEST_EMULATE
    (void)m;
    (void)num;
    *why = "host build: bitwise";
    return 0.0;
#else
    const int64_t V = m->cfg.vocab;
    rc_numerics nums[2] = {*num, rc_numerics_fp32()};
    nums[0].wq = (rc_wq_numerics){0};
    float *out[2];
    for (int k = 0; k < 2; k++) {
        rc_backend *cpu;
        ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &cpu) == RC_OK);
        rc_engine *e;
        ck_assert_msg(rc_engine_create(m, cpu, &nums[k], 2, 16, 32, &e) == RC_OK, "%s", rc_last_error());
        out[k] = malloc(sizeof(float) * 12 * V);
        ck_assert(out[k] != NULL);
        ck_assert_msg(rc_full_forward(e, k_twin_tok, k_twin_lens, 2, out[k]) == RC_OK, "%s", rc_last_error());
        rc_engine_free(e);
        rc_backend_destroy(cpu);
    }
    double d = 0;
    for (int64_t i = 0; i < 12 * V; i++)
        d = fmax(d, fabs((double)out[0][i] - (double)out[1][i]));
    free(out[0]);
    free(out[1]);
    *why = "the CPU's bf16 vs fp32 forward, to be measured";
    return d;
#endif
}

/* the hybrid fixtures (Gated DeltaNet layers and gated attention) */
static const char *const k_hybrid_fixtures[] = {"qnext_hybrid", "q35_moe", "q35_dense"};
#define N_HYBRID ((int)(sizeof k_hybrid_fixtures / sizeof k_hybrid_fixtures[0]))

/* The twin sequences on backend be: the full forward (full) and a cached run (cached) -- a prefill of each
 * sequence's first 4 tokens in one call, then one token per sequence per step -- each [12][vocab] */
static void hybrid_runs(const rc_model *m, const rc_numerics *num, rc_backend *be, float *full, float *cached)
{
    const int64_t V = m->cfg.vocab, off[2] = {0, 7};
    rc_engine *e;
    ck_assert_msg(rc_engine_create(m, be, num, 2, 16, 32, &e) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(rc_full_forward(e, k_twin_tok, k_twin_lens, 2, full) == RC_OK, "%s", rc_last_error());
    rc_engine_free(e);
    ck_assert_msg(rc_engine_create(m, be, num, 2, 16, 32, &e) == RC_OK, "%s", rc_last_error());
    const int64_t slots[2] = {0, 1}, pre_starts[2] = {0, 0}, pre_n[2] = {4, 4}, rows[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int32_t pre[8];
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 4; t++)
            pre[b * 4 + t] = k_twin_tok[off[b] + t];
    float *lp = malloc(sizeof(float) * 8 * V);
    ck_assert(lp != NULL);
    ck_assert_msg(rc_engine_step(e, slots, pre_starts, pre_n, 2, pre, rows, 8, lp, NULL, NULL) == RC_OK, "%s",
                  rc_last_error());
    for (int b = 0; b < 2; b++)
        memcpy(cached + off[b] * V, lp + b * 4 * V, sizeof(float) * 4 * V);
    for (int64_t t = 4; t < 7; t++) {
        int64_t sl[2], st[2], nn[2], rr[2], nb = 0;
        int32_t tok[2];
        for (int64_t b = 0; b < 2; b++)
            if (t < k_twin_lens[b]) {
                sl[nb] = b, st[nb] = t, nn[nb] = 1, rr[nb] = nb;
                tok[nb] = k_twin_tok[off[b] + t];
                nb++;
            }
        ck_assert_msg(rc_engine_step(e, sl, st, nn, nb, tok, rr, nb, lp, NULL, NULL) == RC_OK, "%s", rc_last_error());
        for (int64_t i = 0; i < nb; i++)
            memcpy(cached + (off[sl[i]] + t) * V, lp + i * V, sizeof(float) * V);
    }
    free(lp);
    rc_engine_free(e);
}

/* The hybrid models on this backend against the CPU backend (_i: fixture, then one of 4 settings): the full
 * forward and a cached run (a 4-token prefill, then decode) of the twin sequences. In bf16 with invariant kernels
 * (the recurrent form throughout), the state in fp32 and, with prefix-cache=on, in the dtype: bitwise the CPU's
 * in the host build (on a GPU bounded by twin_bound, to be measured). In fp32 with engine kernels (the chunked
 * form; chunks of 64, and of 2 with prefix-cache=on and the state in the dtype): within test_fixture_vs_hf's
 * 1e-5 of the CPU (cuBLAS's sums are not the CPU's). */
START_TEST(test_hybrid_twin)
{
    const char *name = k_hybrid_fixtures[_i / 4];
    const int v = _i % 4;
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    ck_assert(m->cfg.n_linear > 0);
    const int64_t V = m->cfg.vocab;
    const bool inv = v < 2;
    rc_numerics num = rc_numerics_fp32();
    num.dt = inv ? RC_BF16 : RC_F32;
    num.state_dtype = v % 2 == 1;
    num.prefix_cache = v % 2 == 1;
    num.gdn_chunk = v == 3 ? 2 : 0;
    const rc_kernels k = inv ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE;
    float *out[2][2];
    rc_backend *be[2];
    ck_assert_msg(test_backend_create(k, &be[0]) == RC_OK, "%s", rc_last_error());
    ck_assert(rc_backend_cpu_create(0, k, &be[1]) == RC_OK);
    for (int b = 0; b < 2; b++) {
        out[b][0] = malloc(sizeof(float) * 12 * V);
        out[b][1] = malloc(sizeof(float) * 12 * V);
        ck_assert(out[b][0] && out[b][1]);
        hybrid_runs(m, &num, be[b], out[b][0], out[b][1]);
    }
    double d[2] = {0, 0};
    int64_t same[2] = {0, 0};
    for (int r = 0; r < 2; r++)
        for (int64_t i = 0; i < 12 * V; i++) {
            d[r] = fmax(d[r], fabs((double)out[0][r][i] - (double)out[1][r][i]));
            same[r] += memcmp(&out[0][r][i], &out[1][r][i], sizeof(float)) == 0;
        }
    const char *why = "test_fixture_vs_hf's bound";
    const double bound = inv ? twin_bound(m, &num, &why) : 1e-5;
    char what[96];
    snprintf(what, sizeof what, "%s %s state=%s chunk=%lld prefix-cache=%s", inv ? "bf16" : "fp32",
             rc_kernels_name(k), num.state_dtype ? "dtype" : "fp32", (long long)(num.gdn_chunk ? num.gdn_chunk : 64),
             num.prefix_cache ? "on" : "off");
    printf("%-10s %-14s %s: vs CPU full forward max|dlogp| %.3e (%lld of %lld bitwise), cached prefill + decode "
           "%.3e (%lld bitwise); bound %.3e (%s)\n", TEST_NAME, name, what, d[0], (long long)same[0],
           (long long)(12 * V), d[1], (long long)same[1], bound, why);
    ck_assert_msg(d[0] <= bound && d[1] <= bound, "%s %s: vs the CPU %g / %g > %g", name, what, d[0], d[1], bound);
    for (int b = 0; b < 2; b++)
        free(out[b][0]), free(out[b][1]);
    rc_backend_destroy(be[0]);
    rc_backend_destroy(be[1]);
    rc_model_free(m);
}
END_TEST

/* mode=autocast (fp32 masters under torch.autocast; _i 0, 1) and Megatron's
 * fp32 residual stream (residual=fp32; _i 2, 3) on this backend: the full forward of two rotary fixtures in bf16 with invariant kernels equals
 * the CPU backend's bit for bit in the host build (same code, fixed order;
 * on a GPU bounded by twin_bound, to be measured), and the cached decode equals the full forward bit for bit. */
START_TEST(test_autocast_twin)
{
    const char *name = _i % 2 ? "llama_gqa" : "neox_parallel";
    const char *mode = _i < 2 ? "autocast" : "residual=fp32";
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const int64_t V = m->cfg.vocab;
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    num.mode = _i < 2 ? RC_PREC_AUTOCAST : RC_PREC_PURE;
    num.residual_f32 = _i >= 2;
    twin_result r = twin_runs(m, &num);
    const double dcpu = r.dcpu;
    printf("%-10s %-14s %s bf16 invariant: full forward vs CPU max|dlogp| %.3e; cached decode vs full "
           "forward %lld of %lld bitwise equal\n",
           TEST_NAME, name, mode, dcpu, (long long)r.same, (long long)(12 * V));
    const char *why;
    const double bound = twin_bound(m, &num, &why);
    printf("%-10s %-14s %s bf16 invariant: measured max %.3e bound %.3e (full forward vs CPU; %s)\n", TEST_NAME,
           name, mode, dcpu, bound, why);
    ck_assert_msg(dcpu <= bound, "%s: %s vs CPU differs by %g > %g", name, mode, dcpu, bound);
    ck_assert_int_eq(r.same, 12 * V);
    twin_free(&r);
    rc_model_free(m);
}
END_TEST

/* Gemma's (1 + w) norm weights, embedding scale and soft-capping in bf16 and fp16 (_i: fixture _i / 2,
 * bf16 or fp16): the GPU engine's full forward with invariant kernels equals the CPU's bit for bit in
 * the host build (the (1 + w) weights are uploaded in fp32, not rounded to the dtype with the rest;
 * on a GPU bounded by twin_bound, to be measured), and the cached decode equals the full forward */
START_TEST(test_gemma_half_twin)
{
    const char *name = _i / 2 ? "gemma3_local" : "gemma2_softcap";
    const rc_dtype dt = _i % 2 ? RC_F16 : RC_BF16;
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const int64_t V = m->cfg.vocab;
    rc_numerics num = rc_numerics_fp32();
    num.dt = dt;
    twin_result r = twin_runs(m, &num);
    const char *why;
    const double bound = twin_bound(m, &num, &why);
    printf("%-10s %-14s %s invariant: measured max %.3e bound %.3e (full forward vs CPU; %s); cached decode vs "
           "full forward %lld of %lld bitwise equal\n",
           TEST_NAME, name, dt_name(dt), r.dcpu, bound, why, (long long)r.same, (long long)(12 * V));
    ck_assert_msg(r.dcpu <= bound, "%s %s: vs CPU differs by %g > %g", name, dt_name(dt), r.dcpu, bound);
    ck_assert_int_eq(r.same, 12 * V);
    twin_free(&r);
    rc_model_free(m);
}
END_TEST

/* Latent attention's absorbed form (mla=absorbed: the latent cache, R(q_nope . W_UK), R(o . W_UV^T), built
 * from the backend's gathers and GEMMs) in bf16 (_i: fixture _i / 2, the absorbed or the expanded form): the
 * GPU engine's full forward with invariant kernels against the CPU's (bit for bit in the host build; on a
 * GPU twin_bound), and the cached decode equals the full forward */
START_TEST(test_mla_twin)
{
    const char *name = _i / 2 ? "deepseek_v3_qproj" : "deepseek_v3_mla";
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const int64_t V = m->cfg.vocab;
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    num.mla_absorbed = _i % 2 == 0;
    twin_result r = twin_runs(m, &num);
    const char *why;
    const double bound = twin_bound(m, &num, &why);
    printf("%-10s %-17s bf16 %s invariant: measured max %.3e bound %.3e (full forward vs CPU; %s); cached decode vs "
           "full forward %lld of %lld bitwise equal\n",
           TEST_NAME, name, num.mla_absorbed ? "absorbed" : "expanded", r.dcpu, bound, why, (long long)r.same,
           (long long)(12 * V));
    ck_assert_msg(r.dcpu <= bound, "%s: vs CPU differs by %g > %g", name, r.dcpu, bound);
    ck_assert_int_eq(r.same, 12 * V);
    twin_free(&r);
    rc_model_free(m);
}
END_TEST

/* mla=engine (a prefill expanded, a decode step absorbed) on the two latent-attention fixtures, bf16 with
 * invariant kernels: the full forward (prefill calls: both forms' passes, the expanded rows kept) equals the
 * CPU's bit for bit in the host build (on a GPU bounded by twin_bound); the one-token decode steps run
 * absorbed, so they are printed against the full forward, not held to it */
START_TEST(test_mla_engine_twin)
{
    const char *name = _i ? "deepseek_v3_qproj" : "deepseek_v3_mla";
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const int64_t V = m->cfg.vocab;
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    num.mla_absorbed = true;
    num.mla_prefill_expanded = true;
    twin_result r = twin_runs(m, &num);
    const char *why;
    const double bound = twin_bound(m, &num, &why);
    printf("%-10s %-17s bf16 engine form invariant: measured max %.3e bound %.3e (full forward vs CPU; %s); "
           "absorbed decode steps vs expanded full forward %lld of %lld bitwise equal\n",
           TEST_NAME, name, r.dcpu, bound, why, (long long)r.same, (long long)(12 * V));
    ck_assert_msg(r.dcpu <= bound, "%s: vs CPU differs by %g > %g", name, r.dcpu, bound);
    twin_free(&r);
    rc_model_free(m);
}
END_TEST

/* The grouped sigmoid router kept fp32 in bf16 and fp16 (_i: fixture _i / 2, GLM-4.5's or DeepSeek-V3's with
 * latent attention; dtype bf16 or fp16 by _i % 2): the GPU engine uploads the router weight and
 * e_score_correction_bias unrounded (not rounded to the dtype with the rest), so its full forward with
 * invariant kernels equals the CPU's bit for bit in the host build (on a GPU bounded by twin_bound, to be
 * measured), and the cached decode equals the full forward */
START_TEST(test_glm4_moe_half_twin)
{
    static const char *const k_names[] = {"glm4_moe", "deepseek_v3_moe"};
    const char *name = k_names[_i / 2];
    const rc_dtype dt = _i % 2 ? RC_F16 : RC_BF16;
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    ck_assert(m->cfg.router_gate_f32);
    const int64_t V = m->cfg.vocab;
    rc_numerics num = rc_numerics_fp32();
    num.dt = dt;
    twin_result r = twin_runs(m, &num);
    const char *why;
    const double bound = twin_bound(m, &num, &why);
    printf("%-10s %-15s %s invariant: measured max %.3e bound %.3e (full forward vs CPU; %s); cached decode vs "
           "full forward %lld of %lld bitwise equal\n",
           TEST_NAME, name, dt_name(dt), r.dcpu, bound, why, (long long)r.same, (long long)(12 * V));
    ck_assert_msg(r.dcpu <= bound, "%s %s: vs CPU differs by %g > %g", name, dt_name(dt), r.dcpu, bound);
    ck_assert_int_eq(r.same, 12 * V);
    twin_free(&r);
    rc_model_free(m);
}
END_TEST

/* router=dtype on DeepSeek-V3 (vLLM's default gate: the router weight rounded to the dtype, its logits rounded
 * once; _i: bf16 or fp16): the GPU engine uploads the rounded router weight as the CPU engine places it, so its full
 * forward with invariant kernels equals the CPU's bit for bit in the host build (on a GPU bounded by twin_bound),
 * and the cached decode equals the full forward */
START_TEST(test_router_dtype_twin)
{
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/deepseek_v3_moe");
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    ck_assert(m->cfg.router_gate_f32 && m->cfg.router_gate_engine_dt);
    const int64_t V = m->cfg.vocab;
    rc_numerics num = rc_numerics_fp32();
    num.dt = _i ? RC_F16 : RC_BF16;
    num.router_dtype = true;
    twin_result r = twin_runs(m, &num);
    const char *why;
    const double bound = twin_bound(m, &num, &why);
    printf("%-10s deepseek_v3_moe %s router=dtype invariant: measured max %.3e bound %.3e (full forward vs CPU; %s); "
           "cached decode vs full forward %lld of %lld bitwise equal\n",
           TEST_NAME, dt_name(num.dt), r.dcpu, bound, why, (long long)r.same, (long long)(12 * V));
    ck_assert_msg(r.dcpu <= bound, "%s: vs CPU differs by %g > %g", dt_name(num.dt), r.dcpu, bound);
    ck_assert_int_eq(r.same, 12 * V);
    twin_free(&r);
    rc_model_free(m);
}
END_TEST

/* weights=as-stored on a DeepSeek-V3 FP8 checkpoint (data/fixtures/moe_fp8/deepseek_v3_fp8: 128 x 128
 * blocks, two MoE layers whose experts run by the fused-MoE rule, moe.c experts_fused_fp8), bf16 with
 * invariant kernels, latent attention absorbed or expanded by _i: the GPU engine's full forward equals the
 * CPU's bit for bit in the host build (on a GPU bounded by twin_bound), and the cached decode equals the
 * full forward */
START_TEST(test_moe_asstored_twin)
{
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/moe_fp8/deepseek_v3_fp8");
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const int64_t V = m->cfg.vocab;
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    num.mla_absorbed = _i == 0;
    num.wq = (rc_wq_numerics){RC_WQ_STORED, RC_WSCALE_BLOCK, RC_ACTQ_TOKEN};
    twin_result r = twin_runs(m, &num);
    const char *why;
    const double bound = twin_bound(m, &num, &why);
    printf("%-10s deepseek_v3_fp8 bf16 as-stored %s invariant: measured max %.3e bound %.3e (full forward vs CPU; "
           "%s); cached decode vs full forward %lld of %lld bitwise equal\n", TEST_NAME,
           num.mla_absorbed ? "absorbed" : "expanded", r.dcpu, bound, why, (long long)r.same, (long long)(12 * V));
    ck_assert_msg(r.dcpu <= bound, "vs CPU differs by %g > %g", r.dcpu, bound);
    ck_assert_int_eq(r.same, 12 * V);
    twin_free(&r);
    rc_model_free(m);
}
END_TEST

/* A Llama whose every GEMM size is a multiple of 128 (hidden 128, 2 heads of
 * 64, 2 KV heads, intermediate 256, vocab 128, `layers` layers (1 to 3), tied
 * embeddings), random fp32 weights, written into dir (config.json,
 * model.safetensors): what block weights need, which no fixture has. */
void write_block_model_n(const char *dir, int layers)
{
    ck_assert(layers >= 1 && layers <= 3);
    const rc_test_llama s = {.hidden = 128, .intermediate = 256, .heads = 2, .kv_heads = 2, .head_dim = 64,
                             .layers = layers, .vocab = 128, .tied = true, .scale = 0.15f};
    rc_test_write_llama(dir, &s);
}

static void write_block_model(const char *dir) { write_block_model_n(dir, 2); }

/* --sampler weights=fp8 on this backend, whole model: the full forward of a
 * GQA fixture (llama_gqa; block weights: write_block_model's Llama, whose
 * sizes are multiples of 128) in bf16 with invariant kernels under each
 * weight scale and activation mode equals the CPU backend's bit for bit in the host build (on
 * a GPU the difference is bounded as test_autocast_twin's: twin_bound, to be
 * measured); per token and W8A16 are
 * row-local, so the cached decode equals the full forward bit for bit too
 * (per tensor: the scale is the call's, the decode's differs by design).
 * Loop index: the mode. */
START_TEST(test_fp8w_twin)
{
    static const rc_wq_numerics modes[] = {{RC_WQ_FP8, RC_WSCALE_TENSOR, RC_ACTQ_TOKEN},
                                           {RC_WQ_FP8, RC_WSCALE_CHANNEL, RC_ACTQ_TENSOR},
                                           {RC_WQ_FP8, RC_WSCALE_TENSOR, RC_ACTQ_NONE},
                                           {RC_WQ_FP8, RC_WSCALE_CHANNEL, RC_ACTQ_TOKEN},
                                           {RC_WQ_FP8, RC_WSCALE_CHANNEL, RC_ACTQ_NONE},
                                           {RC_WQ_FP8, RC_WSCALE_BLOCK, RC_ACTQ_TOKEN},
                                           {RC_WQ_FP8, RC_WSCALE_BLOCK, RC_ACTQ_NONE}};
    static const char *const names[] = {"tensor/token", "channel/tensor", "tensor/none", "channel/token",
                                        "channel/none", "block/group",    "block/none"};
    const rc_wq_numerics wq = modes[_i];
    char dir[4096], tmp[64] = "";
    if (wq.scale == RC_WSCALE_BLOCK) {
        ck_assert(rc_test_mkdtemp(tmp, sizeof tmp, "/tmp/rc_test_fp8w_") != NULL);
        write_block_model(tmp);
        snprintf(dir, sizeof dir, "%s", tmp);
    } else {
        rc_test_source_path(dir, sizeof dir, "data/fixtures/llama_gqa");
    }
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    if (tmp[0])
        rc_test_rm_rf(tmp);
    const int64_t V = m->cfg.vocab;
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    num.wq = wq;
    twin_result r = twin_runs(m, &num);
    const double dcpu = r.dcpu;
    /* the fp8 weights changed the result: not the plain bf16 forward */
    rc_numerics nb16 = num;
    nb16.wq = (rc_wq_numerics){0};
    rc_backend *cpu;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &cpu) == RC_OK);
    rc_engine *e3;
    float *plain = malloc(sizeof(float) * 12 * V);
    ck_assert(rc_engine_create(m, cpu, &nb16, 2, 16, 32, &e3) == RC_OK);
    ck_assert(rc_full_forward(e3, k_twin_tok, k_twin_lens, 2, plain) == RC_OK);
    rc_engine_free(e3);
    rc_backend_destroy(cpu);
    double dplain = 0;
    for (int64_t i = 0; i < 12 * V; i++) {
        const double dp = fabs((double)plain[i] - (double)r.out[1][i]);
        dplain = dp > dplain ? dp : dplain;
    }
    printf("%-10s fp8 weights %-14s bf16 invariant: full forward vs CPU max|dlogp| %.3e (vs plain bf16 %.3e); "
           "cached decode vs full forward %lld of %lld bitwise equal\n",
           TEST_NAME, names[_i], dcpu, dplain, (long long)r.same, (long long)(12 * V));
    ck_assert_msg(dplain > 0, "%s: fp8 weights left the bf16 log-probs unchanged", names[_i]);
    const char *why;
    const double bound = twin_bound(m, &num, &why);
    printf("%-10s fp8 weights %-14s bf16 invariant: measured max %.3e bound %.3e (full forward vs CPU; %s)\n",
           TEST_NAME, names[_i], dcpu, bound, why);
    ck_assert_msg(dcpu <= bound, "%s: fp8 weights vs CPU differs by %g > %g", names[_i], dcpu, bound);
    if (wq.act != RC_ACTQ_TENSOR)
        ck_assert_int_eq(r.same, 12 * V);
    twin_free(&r);
    free(plain);
    rc_model_free(m);
}
END_TEST

/* Tensor parallelism on the backend under test: the engine's row-parallel
 * layers (K-slice GEMMs into device partials, the reduce's adds, the
 * Megatron bias rows gathered) give the CPU's log-probs, invariant kernels,
 * full forward of a few sequences: fp32 (the GPU's limit as above, 1e-5) and,
 * in the host build, bf16 too, both bitwise there. */
START_TEST(test_tp_forward)
{
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/neox_parallel");
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const int64_t V = m->cfg.vocab, lens[3] = {5, 3, 7}, total = 15;
    int32_t tok[15];
    for (int i = 0; i < 15; i++)
        tok[i] = (int32_t)((i * 37 + 11) % V);
    const struct {
        int tp;
        rc_tp_reduce mode;
        bool trainer;
    } cases[] = {{2, RC_TP_REDUCE_FP32, false}, {4, RC_TP_REDUCE_RING, true}, {4, RC_TP_REDUCE_CHAIN, false}};
    rc_backend *be, *cpu;
    ck_assert_msg(test_backend_create(RC_KERNELS_INVARIANT, &be) == RC_OK, "%s", rc_last_error());
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &cpu) == RC_OK);
    float *out = malloc(sizeof(float) * total * V), *cout = malloc(sizeof(float) * total * V);
#ifdef RC_TEST_EMULATE
    const int n_dt = 2;
#else
    const int n_dt = 1;
#endif
    for (int di = 0; di < n_dt; di++)
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            rc_numerics num = rc_numerics_fp32();
            num.dt = di ? RC_BF16 : RC_F32;
            num.tp = cases[ci].tp;
            num.tp_reduce = cases[ci].mode;
            num.tp_trainer = cases[ci].trainer;
            rc_engine *e, *ec;
            ck_assert_msg(rc_engine_create(m, be, &num, 3, 8, total, &e) == RC_OK, "%s", rc_last_error());
            ck_assert_msg(rc_full_forward(e, tok, lens, 3, out) == RC_OK, "%s", rc_last_error());
            ck_assert(rc_engine_create(m, cpu, &num, 3, 8, total, &ec) == RC_OK);
            ck_assert(rc_full_forward(ec, tok, lens, 3, cout) == RC_OK);
            double d = 0;
            for (int64_t i = 0; i < total * V; i++)
                d = fmax(d, fabs((double)out[i] - (double)cout[i]));
            printf("%-10s tp=%d %-5s %s %s: full forward vs CPU max|dlogp| %.3e\n", TEST_NAME, cases[ci].tp,
                   rc_tp_reduce_name(cases[ci].mode), cases[ci].trainer ? "trainer" : "sampler", dt_name(num.dt), d);
#ifdef RC_TEST_EMULATE
            ck_assert_msg(d == 0, "tp=%d: host build vs CPU differs by %g", cases[ci].tp, d);
#else
            ck_assert_msg(d <= 1e-5, "tp=%d: GPU vs CPU differs by %g", cases[ci].tp, d);
#endif
            rc_engine_free(e);
            rc_engine_free(ec);
        }
    free(out), free(cout);
    rc_backend_destroy(be);
    rc_backend_destroy(cpu);
    rc_model_free(m);
}
END_TEST

/* The ratio check on the bundled model with invariant kernels: every ratio
 * exactly 1 in fp32, bf16 and fp16; engine kernels run and give finite
 * ratios (printed next to the CPU engine's). */
START_TEST(test_ratio_default_model)
{
    const rc_dtype dt = k_dts[_i];
    char p[4096];
    rc_model *m;
    rc_prompts pr;
    rc_test_source_path(p, sizeof p, "data/models/pythia-rc-tiny");
    ck_assert_msg(rc_model_load(p, &m) == RC_OK, "%s", rc_last_error());
    rc_test_source_path(p, sizeof p, "data/prompts/default.ids");
    ck_assert_msg(rc_prompts_load_ids(p, &pr) == RC_OK, "%s", rc_last_error());
    rc_rollout_cfg c;
    memset(&c, 0, sizeof c);
    c.n_prompts = pr.n < 4 ? pr.n : 4;
    c.prompt_max = pr.max_len;
    c.prompt_tokens = pr.tokens;
    c.prompt_len = pr.len;
    c.samples = 2;
    c.batch = 8;
    c.n_lens = 2;
    c.lens[0] = 6;
    c.lens[1] = 12;
    c.seed = 3;
    c.sampling.top_k = 0;
    c.sampling.top_p = 1.0;
    c.num = rc_numerics_fp32();
    c.num.dt = dt;
    for (int k = 0; k < 2; k++) {
        rc_kernels kern = k ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE;
        rc_backend *be, *cpu;
        ck_assert_msg(test_backend_create(kern, &be) == RC_OK, "%s", rc_last_error());
        ck_assert(rc_backend_cpu_create(0, kern, &cpu) == RC_OK);
        rc_results r, rc;
        memset(&r, 0, sizeof r);
        memset(&rc, 0, sizeof rc);
        rc_status s = rc_run_check(m, be, NULL, &c, NULL, NULL, NULL, &r);
        ck_assert_msg(s == RC_OK, "%s", rc_last_error());
        ck_assert(rc_run_check(m, cpu, NULL, &c, NULL, NULL, NULL, &rc) == RC_OK);
        for (int i = 0; i < r.n_lens; i++) {
            printf("%-10s %s %-9s L=%lld ratio mean %.6f std %.3e min %.5f max %.5f identical %.3f | cpu std %.3e\n",
                   TEST_NAME, dt_name(dt), rc_kernels_name(kern), (long long)r.lens[i].len, r.lens[i].st.mean,
                   r.lens[i].st.std, r.lens[i].st.min, r.lens[i].st.max, r.lens[i].st.identical_frac,
                   rc.lens[i].st.std);
            ck_assert(isfinite(r.lens[i].st.mean) && isfinite(r.lens[i].st.std));
            if (kern == RC_KERNELS_INVARIANT) {
                ck_assert_msg(r.lens[i].st.identical_frac == 1.0, "%s invariant: %g of log-probs identical",
                              dt_name(dt), r.lens[i].st.identical_frac);
                ck_assert(r.lens[i].st.min == 1.0 && r.lens[i].st.max == 1.0);
            }
        }
        rc_results_free(&r);
        rc_results_free(&rc);
        rc_backend_destroy(be);
        rc_backend_destroy(cpu);
    }
    rc_prompts_free(&pr);
    rc_model_free(m);
}
END_TEST

void model_tests_in_op_twins(TCase *tc)
{
    tcase_add_test(tc, test_tp_forward);
}

void model_tests_in_model(TCase *tc)
{
    tcase_add_loop_test(tc, test_fixture_vs_hf, 0, 2 * N_FIXTURES);
    tcase_add_loop_test(tc, test_ratio_default_model, 0, 3);
    tcase_add_loop_test(tc, test_autocast_twin, 0, 4);
    tcase_add_loop_test(tc, test_gemma_half_twin, 0, 4);
    tcase_add_loop_test(tc, test_mla_twin, 0, 4);
    tcase_add_loop_test(tc, test_mla_engine_twin, 0, 2);
    tcase_add_loop_test(tc, test_glm4_moe_half_twin, 0, 4);
    tcase_add_loop_test(tc, test_router_dtype_twin, 0, 2);
    tcase_add_loop_test(tc, test_fp8w_twin, 0, 7);
    tcase_add_loop_test(tc, test_moe_asstored_twin, 0, 2);
    tcase_add_loop_test(tc, test_hybrid_twin, 0, 4 * N_HYBRID);
}
