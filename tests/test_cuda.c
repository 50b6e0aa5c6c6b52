/* The CUDA backend against its CPU twin (backend_cpu.c) and against HF.
 *
 * Built twice (tests/meson.build):
 *  - `cuda`: the real CUDA backend (kernels/ built by nvcc). Without a usable
 *    GPU it prints the reason and exits 77, which meson reports as SKIP.
 *  - `cuda_host`: the same sources, kernels/ *.cu, compiled for the host by
 *    g++ against stand-ins for the CUDA runtime and cuBLAS (tests/cuda_shim/:
 *    host memory, every thread of a launch's grid run in turn, an fp32 GEMM
 *    in place of cuBLAS). It runs everywhere, so the backend's host code
 *    (allocation, workspaces, batch copies, the bf16 / fp16 operand route to
 *    cuBLAS, launch splitting, error checks) and every kernel's indexing are
 *    exercised in CI; faults are injected to test the error paths. What only
 *    a GPU shows: the device compiler's arithmetic, cuBLAS, real memory.
 *
 * Tests, the same in both builds:
 *  - every op against the CPU backend over a table of shapes (odd sizes,
 *    GQA ratios, partial rotary, sliding window, long and short sequences,
 *    prefill, decode and continued prefill), tolerances in k_tol (one table);
 *  - whole-model log-probs on every fixture vs HF fp32 (<= 1e-5, as the CPU)
 *    and vs the CPU backend (<= 1e-5; host build, invariant: bitwise);
 *  - cached decode vs full forward;
 *  - --kernels invariant: every ratio exactly 1 in fp32, bf16 and fp16;
 *  - the sampler's fp8 weights (every scale and activation mode) op by op and
 *    over whole models, and the fp8 settings through the CLI, against the CPU;
 *  - error paths that need no GPU (messages of failed CUDA / cuBLAS calls,
 *    creating the backend without a device, launch splitting). */
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

#ifdef RC_TEST_EMULATE
#define TEST_NAME "cuda_host"
#else
#define TEST_NAME "cuda"
#endif

/* ---- per-op tolerances: one table ----------------------------------------
 * max |test - cpu| <= ulps x ulp_dt(max |cpu|) over the op's output, the ulp
 * of the output dtype (fp32 outputs: fp32 ulps). 0: bitwise equal.
 * host build: same code and compiler as the CPU, so everything is bitwise
 * except the engine GEMM (the stand-in's fp32 dot instead of cuBLAS).
 * GPU: + - * / sqrtf are IEEE on both sides and FMA contraction is off on
 * both (-fmad=false, C11 -ffp-contract=off), so data movement, norms and the
 * fixed-order GEMM are exact. Ops calling expf / erff / tanhf / cosf / sinf /
 * logf differ where CUDA's math library does (a few fp32 ulps); once rounded
 * to bf16 / fp16 that is a rare one-ulp flip of an intermediate, which the
 * later roundings carry: RoPE rounds two products then their sum (2 ulps),
 * act_mul rounds the activation then the product (2), attention rounds
 * probabilities that are then summed against V (8 ulps of the output's
 * largest value), log-softmax rounds once (1). cuBLAS sums in its own order:
 * 64 fp32 ulps of the largest output, one ulp once rounded.
 * The host build's limits are what it measures (bitwise but for the engine
 * GEMM's stand-in); they are the only ones CI runs. The GPU limits differ
 * from them only where a CUDA math-library call is involved, are derived,
 * not measured (no GPU has run this suite), apply only in the real CUDA
 * build (on a device), and are printed marked "to be measured": every
 * comparison prints "measured max X bound Y (NAME)", which
 * tools/gpu/gpu_check.sh collects, so that the first GPU run replaces them
 * with measured ones. */
typedef struct {
    const char *op;
    double emu_f32, emu_md; /* host emulation: fp32 output / bf16-fp16 output */
    double gpu_f32, gpu_md; /* GPU; to be measured where they differ from the host build's */
} tol_row;

static const tol_row k_tol[] = {
    {"round", 0, 0, 0, 0},
    {"embed", 0, 0, 0, 0},
    {"gather", 0, 0, 0, 0},
    {"add", 0, 0, 0, 0},
    {"norm", 0, 0, 0, 0},
    {"qk_norm", 0, 0, 0, 0}, /* norm's row arithmetic, in place on row segments */
    {"matmul_invariant", 0, 0, 0, 0},
    {"matmul_engine", 64, 1, 64, 1},
    {"rope", 0, 0, 4, 2},
    {"kv_cache", 0, 0, 0, 0},
    {"attention", 0, 0, 32, 8},
    {"attention_alibi", 0, 0, 32, 8}, /* as attention: the bias is + and * only */
    {"clamp", 0, 0, 0, 0},
    {"scale", 0, 0, 0, 0},             /* one fp32 product */
    {"softcap", 0, 0, 4, 1},           /* tanhf, as act */
    {"attention_softcap", 0, 0, 32, 8}, /* as attention, tanhf on each score */
    {"moe_route", 0, 0, 4, 1},        /* softmax's expf, as act; the experts chosen must agree exactly */
    {"moe_accumulate", 0, 0, 0, 0},   /* + and * only */
    {"moe_shared", 0, 0, 4, 1},       /* the shared expert's sigmoid gate: expf */
    /* Gated DeltaNet's recurrent step: one expf per step (the decay) scales every state value, and the
     * sums over dk cancel: 4 fp32 ulps of the largest value; once rounded, a one-ulp flip */
    {"gdn_step", 0, 0, 4, 1},
    {"normalize_rows", 0, 0, 0, 0},   /* sqrtf and / are IEEE on both */
    {"act", 0, 0, 4, 1},
    {"act_mul", 0, 0, 4, 2},
    {"logprobs", 0, 0, 4, 1},
    /* fp8 weights (fp8w.c, kernels/fp8.cu): quantization and epilogue are
     * + * / fmaf fmaxf only, the GEMM of fp8 values sums exact products: the
     * invariant GEMM's fixed order gives the CPU's bits, cuBLAS's order (and
     * the stand-in's) an fp32 sum that rounds one ulp away (derived, not
     * measured on a GPU) */
    {"fp8_linear_invariant", 0, 0, 0, 0},
    {"fp8_linear_engine", 64, 1, 64, 1},
};

/* the op's limit in ulps for this build; *unmeasured: a GPU limit not yet measured */
static double tol_for(const char *op, rc_dtype out_dt, bool *unmeasured)
{
    for (size_t i = 0; i < sizeof k_tol / sizeof k_tol[0]; i++)
        if (!strcmp(k_tol[i].op, op)) {
            const double emu = out_dt == RC_F32 ? k_tol[i].emu_f32 : k_tol[i].emu_md;
#ifdef RC_TEST_EMULATE
            *unmeasured = false;
            return emu;
#else
            const double gpu = out_dt == RC_F32 ? k_tol[i].gpu_f32 : k_tol[i].gpu_md;
            *unmeasured = gpu != emu;
            return gpu;
#endif
        }
    ck_abort_msg("no tolerance for op %s", op);
    return 0;
}

/* one unit in the last place of dtype dt at magnitude x */
static double ulp_dt(double x, rc_dtype dt)
{
    int mant = dt == RC_BF16 ? 7 : dt == RC_F16 ? 10 : 23;
    int e;
    frexp(x > 0 ? x : 1e-30, &e); /* x = f * 2^e, 0.5 <= f < 1 */
    return ldexp(1.0, e - 1 - mant);
}

/* ---- the backend under test ------------------------------------------------ */

static rc_status test_backend_create(rc_kernels k, rc_backend **out) { return rc_backend_cuda_create(k, out); }

/* ---- helpers ------------------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float frand(float scale) /* uniform in [-scale, scale) */
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)(g_rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
}

static float *rand_vec(int64_t n, float scale, rc_dtype dt)
{
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    ck_assert(v != NULL);
    for (int64_t i = 0; i < n; i++)
        v[i] = rc_round_to(frand(scale), dt);
    return v;
}

typedef struct {
    rc_backend *t, *c; /* under test, CPU twin */
} pair;

static pair make_pair(rc_kernels k)
{
    pair p;
    rc_status s = test_backend_create(k, &p.t);
    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
    ck_assert(rc_backend_cpu_create(0, k, &p.c) == RC_OK);
    return p;
}

static void free_pair(pair *p)
{
    rc_backend_destroy(p->t);
    rc_backend_destroy(p->c);
}

/* a buffer on the test backend holding host data */
static float *dev_copy(rc_backend *be, const float *host, int64_t n)
{
    float *d;
    ck_assert(be->ops->alloc(be, n, &d) == RC_OK);
    ck_assert_msg(be->ops->upload(be, host, n, RC_F32, d) == RC_OK, "%s", rc_last_error());
    return d;
}

static float *host_copy(rc_backend *be, const float *dev, int64_t n)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    ck_assert(h != NULL);
    ck_assert_msg(be->ops->download(be, dev, n, h) == RC_OK, "%s", rc_last_error());
    return h;
}

/* Failures are counted, not asserted at once, so that one op over its limit
 * does not hide every later measurement of the test (the GPU suite runs
 * without fork); each test ends with end_checks(). */
static int g_failures;
static char g_first_failure[512];

static void begin_checks(void)
{
    g_failures = 0;
    g_first_failure[0] = '\0';
}

static void end_checks(void)
{
    int n = g_failures;
    g_failures = 0;
    ck_assert_msg(n == 0, "%d comparison(s) over their tolerance; the first: %s", n, g_first_failure);
}

/* max |got - ref| against the op's tolerance; prints the measurement */
static void compare(const char *op, const char *what, const float *got, const float *ref, int64_t n, rc_dtype out_dt)
{
    double mx = 0, md = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < n; i++) {
        double r = fabs((double)ref[i]);
        mx = r > mx ? r : mx;
        double dd = fabs((double)got[i] - (double)ref[i]);
        if (!(dd <= md) || (isnan(got[i]) != isnan(ref[i]))) { /* NaN counts as a difference */
            md = isnan(dd) ? INFINITY : dd;
            at = i;
        }
    }
    bool unmeasured;
    double ulps = tol_for(op, out_dt, &unmeasured);
    double tol = ulps * ulp_dt(mx, out_dt);
    const bool over = !(md <= tol);
    printf("%-10s %-9s %-44s measured max %.3e bound %.3e (%s %s: %g ulp of %s at max|ref| %.3g%s)%s\n", TEST_NAME,
           op, what, md, tol, op, what, ulps, out_dt == RC_F32 ? "fp32" : out_dt == RC_BF16 ? "bf16" : "fp16", mx,
           unmeasured ? ", to be measured" : "", over ? "  OVER" : "");
    if (over && g_failures++ == 0)
        snprintf(g_first_failure, sizeof g_first_failure,
                 "%s %s: max |difference| %g at %lld (got %.9g, cpu %.9g) exceeds %g ulp = %g", op, what, md,
                 (long long)at, at >= 0 ? got[at] : 0.0, at >= 0 ? ref[at] : 0.0, ulps, tol);
}

static const rc_dtype k_dts[] = {RC_F32, RC_BF16, RC_F16};
static const char *dt_name(rc_dtype dt) { return dt == RC_F32 ? "fp32" : dt == RC_BF16 ? "bf16" : "fp16"; }

/* ---- op twins ------------------------------------------------------------------ */

START_TEST(test_elementwise)
{
    begin_checks();
    pair p = make_pair(RC_KERNELS_ENGINE);
    const int64_t sizes[] = {1, 7, 1000, 4099};
    const rc_act acts[] = {RC_ACT_GELU_ERF, RC_ACT_GELU_TANH, RC_ACT_SILU, RC_ACT_GELU_BLOOM, RC_ACT_GELU_NEW};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int di = 0; di < 3; di++) {
            const int64_t n = sizes[si];
            const rc_dtype dt = k_dts[di];
            char what[96];
            float *a = rand_vec(n, 6.0f, RC_F32), *b = rand_vec(n, 3.0f, dt);
            /* upload with rounding (the dtype conversion kernel) */
            float *da;
            ck_assert(p.t->ops->alloc(p.t, n, &da) == RC_OK);
            ck_assert(p.t->ops->upload(p.t, a, n, dt, da) == RC_OK);
            float *ga = host_copy(p.t, da, n), *ca = malloc((size_t)n * sizeof *ca);
            ck_assert(p.c->ops->upload(p.c, a, n, dt, ca) == RC_OK);
            snprintf(what, sizeof what, "upload n=%lld %s", (long long)n, dt_name(dt));
            compare("round", what, ga, ca, n, dt);
            /* add */
            float *db = dev_copy(p.t, b, n), *dout;
            ck_assert(p.t->ops->alloc(p.t, n, &dout) == RC_OK);
            float *cout = malloc((size_t)n * sizeof *cout);
            ck_assert(p.t->ops->add(p.t, da, db, n, dt, dout) == RC_OK);
            ck_assert(p.c->ops->add(p.c, ca, b, n, dt, cout) == RC_OK);
            float *g = host_copy(p.t, dout, n);
            snprintf(what, sizeof what, "n=%lld %s", (long long)n, dt_name(dt));
            compare("add", what, g, cout, n, dt);
            free(g);
            for (int ai = 0; ai < 5; ai++) {
                /* act in place on a copy, act_mul with b as `up` */
                float *dx = dev_copy(p.t, ca, n), *cx = malloc((size_t)n * sizeof *cx);
                memcpy(cx, ca, (size_t)n * sizeof *cx);
                ck_assert(p.t->ops->act(p.t, acts[ai], dx, n, dt) == RC_OK);
                ck_assert(p.c->ops->act(p.c, acts[ai], cx, n, dt) == RC_OK);
                g = host_copy(p.t, dx, n);
                snprintf(what, sizeof what, "%s n=%lld %s", ai == 0 ? "gelu" : ai == 1 ? "gelu_tanh" : "silu",
                         (long long)n, dt_name(dt));
                compare("act", what, g, cx, n, dt);
                free(g);
                p.t->ops->free(p.t, dx);
                dx = dev_copy(p.t, ca, n);
                memcpy(cx, ca, (size_t)n * sizeof *cx);
                ck_assert(p.t->ops->act_mul(p.t, acts[ai], dx, db, n, dt, dt) == RC_OK);
                ck_assert(p.c->ops->act_mul(p.c, acts[ai], cx, b, n, dt, dt) == RC_OK);
                g = host_copy(p.t, dx, n);
                compare("act_mul", what, g, cx, n, dt);
                free(g);
                p.t->ops->free(p.t, dx);
                free(cx);
            }
            p.t->ops->free(p.t, da);
            p.t->ops->free(p.t, db);
            p.t->ops->free(p.t, dout);
            free(a), free(b), free(ga), free(ca), free(cout);
        }
    free_pair(&p);
    end_checks();
}
END_TEST

START_TEST(test_embed_gather)
{
    begin_checks();
    pair p = make_pair(RC_KERNELS_ENGINE);
    const int64_t V = 37, H = 19, n = 23;
    float *table = rand_vec(V * H, 1.0f, RC_BF16);
    int32_t tok[23];
    int64_t rows[5] = {22, 0, 5, 5, 13};
    for (int64_t i = 0; i < n; i++)
        tok[i] = (int32_t)((i * 7 + 3) % V);
    float *dt_ = dev_copy(p.t, table, V * H), *dout, *dg;
    ck_assert(p.t->ops->alloc(p.t, n * H, &dout) == RC_OK);
    ck_assert(p.t->ops->alloc(p.t, 5 * H, &dg) == RC_OK);
    float *cout = malloc((size_t)(n * H) * sizeof *cout), *cg = malloc(5 * (size_t)H * sizeof *cg);
    ck_assert(p.t->ops->embed(p.t, tok, n, rc_wt_f32(dt_), H, dout) == RC_OK);
    ck_assert(p.c->ops->embed(p.c, tok, n, rc_wt_f32(table), H, cout) == RC_OK);
    float *g = host_copy(p.t, dout, n * H);
    compare("embed", "V=37 H=19 n=23", g, cout, n * H, RC_F32);
    ck_assert(p.t->ops->gather_rows(p.t, dout, H, rows, 5, dg) == RC_OK);
    ck_assert(p.c->ops->gather_rows(p.c, cout, H, rows, 5, cg) == RC_OK);
    float *g2 = host_copy(p.t, dg, 5 * H);
    compare("gather", "5 of 23 rows, repeats", g2, cg, 5 * H, RC_F32);
    p.t->ops->free(p.t, dt_);
    p.t->ops->free(p.t, dout);
    p.t->ops->free(p.t, dg);
    free(table), free(cout), free(cg), free(g), free(g2);
    free_pair(&p);
    end_checks();
}
END_TEST

START_TEST(test_norm)
{
    begin_checks();
    const int64_t shapes[][2] = {{1, 64}, {15, 100}, {16, 37}, {40, 768}, {3, 1}, {2, 4097}};
    for (int k = 0; k < 2; k++) {
        pair p = make_pair(k ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int di = 0; di < 3; di++)
                for (int kind = 0; kind < 2; kind++) {
                    const int64_t M = shapes[si][0], H = shapes[si][1];
                    const rc_dtype dt = k_dts[di];
                    float *x = rand_vec(M * H, 4.0f, dt), *w = rand_vec(H, 1.5f, dt), *b = rand_vec(H, 0.5f, dt);
                    float *dx = dev_copy(p.t, x, M * H), *dw = dev_copy(p.t, w, H), *db = dev_copy(p.t, b, H), *dout;
                    ck_assert(p.t->ops->alloc(p.t, M * H, &dout) == RC_OK);
                    float *cout = malloc((size_t)(M * H) * sizeof *cout);
                    rc_norm_kind nk = kind ? RC_NORM_RMS : RC_NORM_LAYER;
                    ck_assert(p.t->ops->norm(p.t, nk, dx, M, H, dw, kind ? NULL : db, 1e-5, dt, dt, dout) == RC_OK);
                    ck_assert(p.c->ops->norm(p.c, nk, x, M, H, w, kind ? NULL : b, 1e-5, dt, dt, cout) == RC_OK);
                    float *g = host_copy(p.t, dout, M * H);
                    char what[96];
                    snprintf(what, sizeof what, "%s %s M=%lld H=%lld %s", kind ? "rms" : "layer",
                             rc_kernels_name(p.t->kernels), (long long)M, (long long)H, dt_name(dt));
                    compare("norm", what, g, cout, M * H, dt);
                    p.t->ops->free(p.t, dx), p.t->ops->free(p.t, dw), p.t->ops->free(p.t, db), p.t->ops->free(p.t, dout);
                    free(x), free(w), free(b), free(cout), free(g);
                }
        free_pair(&p);
    }
    end_checks();
}
END_TEST

/* q / k norm in place on packed qkv rows: per head (Qwen3: nq heads of d, nk of d) and over the
 * whole projection (OLMo2: one segment of nh * d, one of nkv * d), V untouched */
START_TEST(test_qk_norm)
{
    begin_checks();
    /* rows, nh, nkv, d, whole */
    const int64_t shapes[][5] = {{1, 4, 2, 18, 0}, {17, 8, 2, 64, 0}, {5, 4, 2, 18, 1}, {300, 6, 3, 10, 1}};
    for (int k = 0; k < 2; k++) {
        pair p = make_pair(k ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int di = 0; di < 3; di++) {
                const int64_t M = shapes[si][0], nh = shapes[si][1], nkv = shapes[si][2], d = shapes[si][3];
                const bool all = shapes[si][4] != 0;
                const int64_t W = (nh + 2 * nkv) * d, nq = all ? 1 : nh, dq = all ? nh * d : d;
                const int64_t nk = all ? 1 : nkv, dk = all ? nkv * d : d;
                const rc_dtype dt = k_dts[di];
                float *x = rand_vec(M * W, 4.0f, dt), *wq = rand_vec(dq, 1.5f, dt), *wk = rand_vec(dk, 1.5f, dt);
                float *dx = dev_copy(p.t, x, M * W), *dwq = dev_copy(p.t, wq, dq), *dwk = dev_copy(p.t, wk, dk);
                ck_assert(p.t->ops->qk_norm(p.t, dx, M, W, nq, dq, dwq, nk, dk, dwk, 1e-6, dt, dt) == RC_OK);
                float *cx = malloc((size_t)(M * W) * sizeof *cx);
                memcpy(cx, x, (size_t)(M * W) * sizeof *cx);
                ck_assert(p.c->ops->qk_norm(p.c, cx, M, W, nq, dq, wq, nk, dk, wk, 1e-6, dt, dt) == RC_OK);
                for (int64_t r = 0; r < M; r++) /* V as it was */
                    ck_assert(memcmp(cx + r * W + (nh + nkv) * d, x + r * W + (nh + nkv) * d,
                                     (size_t)(nkv * d) * sizeof *cx) == 0);
                float *g = host_copy(p.t, dx, M * W);
                char what[96];
                snprintf(what, sizeof what, "%s %s M=%lld %lld/%lld heads of %lld %s", all ? "whole" : "per head",
                         rc_kernels_name(p.t->kernels), (long long)M, (long long)nh, (long long)nkv, (long long)d,
                         dt_name(dt));
                compare("qk_norm", what, g, cx, M * W, dt);
                p.t->ops->free(p.t, dx), p.t->ops->free(p.t, dwq), p.t->ops->free(p.t, dwk);
                free(x), free(wq), free(wk), free(cx), free(g);
            }
        free_pair(&p);
    }
    end_checks();
}
END_TEST

START_TEST(test_matmul)
{
    begin_checks();
    const int64_t shapes[][3] = {{1, 64, 48}, {3, 100, 37}, {17, 256, 129}, {300, 96, 33}, {5, 1, 7}, {16, 768, 96}};
    for (int k = 0; k < 2; k++) {
        pair p = make_pair(k ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int di = 0; di < 3; di++)
                for (int wb = 0; wb < 2; wb++) {
                    const int64_t M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
                    const rc_dtype dt = k_dts[di];
                    float *x = rand_vec(M * K, 1.0f, dt), *W = rand_vec(N * K, 0.2f, RC_F32), *b = rand_vec(N, 1.0f, dt);
                    /* the weights as the engine holds them: one buffer, rounded on upload */
                    float *dW;
                    ck_assert(p.t->ops->alloc(p.t, N * K, &dW) == RC_OK);
                    ck_assert(p.t->ops->upload(p.t, W, N * K, dt, dW) == RC_OK);
                    float *cW = malloc((size_t)(N * K) * sizeof *cW);
                    ck_assert(p.c->ops->upload(p.c, W, N * K, dt, cW) == RC_OK);
                    float *dx = dev_copy(p.t, x, M * K), *db = dev_copy(p.t, b, N), *dy;
                    ck_assert(p.t->ops->alloc(p.t, M * N, &dy) == RC_OK);
                    float *cy = malloc((size_t)(M * N) * sizeof *cy);
                    const float *bias_t = wb ? db : NULL, *bias_c = wb ? b : NULL;
                    rc_status s = p.t->ops->matmul(p.t, dx, M, K, rc_wt_f32(dW), N, bias_t, dt, dt, dy);
                    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
                    ck_assert(p.c->ops->matmul(p.c, x, M, K, rc_wt_f32(cW), N, bias_c, dt, dt, cy) == RC_OK);
                    float *g = host_copy(p.t, dy, M * N);
                    char what[96];
                    snprintf(what, sizeof what, "M=%lld K=%lld N=%lld %s%s", (long long)M, (long long)K, (long long)N,
                             dt_name(dt), wb ? " +bias" : "");
                    compare(k ? "matmul_invariant" : "matmul_engine", what, g, cy, M * N, dt);
                    free(g);
                    /* a K-slice (a TP rank's partial): columns [k0, k0 + Ks) read in place */
                    const int64_t k0 = K / 3, Ks = K - k0 - K / 5;
                    s = p.t->ops->matmul_kslice(p.t, dx, M, K, k0, Ks, rc_wt_f32(dW), N, bias_t, dt, dt, dy);
                    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
                    ck_assert(p.c->ops->matmul_kslice(p.c, x, M, K, k0, Ks, rc_wt_f32(cW), N, bias_c, dt, dt, cy) ==
                              RC_OK);
                    g = host_copy(p.t, dy, M * N);
                    snprintf(what, sizeof what, "M=%lld K=%lld [%lld, +%lld) N=%lld %s%s", (long long)M, (long long)K,
                             (long long)k0, (long long)Ks, (long long)N, dt_name(dt), wb ? " +bias" : "");
                    compare(k ? "matmul_invariant" : "matmul_engine", what, g, cy, M * N, dt);
                    p.t->ops->free(p.t, dW), p.t->ops->free(p.t, dx), p.t->ops->free(p.t, db), p.t->ops->free(p.t, dy);
                    free(x), free(W), free(b), free(cW), free(cy), free(g);
                }
        free_pair(&p);
    }
    end_checks();
}
END_TEST

/* fp8 weights' linear (--sampler weights=fp8) against the CPU's: every
 * weight scale and activation mode, bf16 and fp16, with and without bias,
 * decode-sized and prefill-sized M; K = 256 (two 128-deep slices), N = 136
 * (a padded edge block). The inputs hold a zero row (the per-token minimum
 * scale) and a row of large values. rc_fp8w_linear_once quantizes the same
 * weights on the host for both backends; the CUDA side then runs its
 * activation kernels, its GEMM (invariant: the fixed-order kernel; engine:
 * cuBLAS with bf16 operands) and the epilogue kernels. */
START_TEST(test_fp8w_linear)
{
    begin_checks();
    static const rc_wq_numerics modes[] = {
        {RC_WQ_FP8, RC_WSCALE_TENSOR, RC_ACTQ_TOKEN},  {RC_WQ_FP8, RC_WSCALE_TENSOR, RC_ACTQ_TENSOR},
        {RC_WQ_FP8, RC_WSCALE_TENSOR, RC_ACTQ_NONE},   {RC_WQ_FP8, RC_WSCALE_CHANNEL, RC_ACTQ_TOKEN},
        {RC_WQ_FP8, RC_WSCALE_CHANNEL, RC_ACTQ_TENSOR}, {RC_WQ_FP8, RC_WSCALE_CHANNEL, RC_ACTQ_NONE},
        {RC_WQ_FP8, RC_WSCALE_BLOCK, RC_ACTQ_TOKEN},   {RC_WQ_FP8, RC_WSCALE_BLOCK, RC_ACTQ_NONE}};
    static const char *const names[] = {"tensor/token", "tensor/tensor", "tensor/none", "channel/token",
                                        "channel/tensor", "channel/none", "block/group", "block/none"};
    const int64_t K = 256, N = 136, Ms[] = {3, 20};
    for (int kk = 0; kk < 2; kk++) {
        pair p = make_pair(kk ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE);
        for (int di = 1; di < 3; di++)
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
                for (size_t q = 0; q < sizeof modes / sizeof modes[0]; q++)
                    for (int wb = 0; wb < 2; wb++) {
                        const rc_dtype dt = k_dts[di];
                        const int64_t M = Ms[mi];
                        float *x = rand_vec(M * K, 2.0f, dt), *w = rand_vec(N * K, 0.1f, dt),
                              *b = rand_vec(N, 0.5f, dt);
                        for (int64_t k = 0; k < K; k++) {
                            x[k] = 0.0f;                                         /* row 0: all zeros */
                            x[K + k] = rc_round_to(x[K + k] * 300.0f, dt); /* row 1: large values */
                        }
                        float *yt = malloc((size_t)(M * N) * sizeof *yt), *yc = malloc((size_t)(M * N) * sizeof *yc);
                        rc_status st = rc_fp8w_linear_once(p.t, x, M, K, w, N, wb ? b : NULL, &modes[q], dt, yt);
                        ck_assert_msg(st == RC_OK, "%s", rc_last_error());
                        ck_assert(rc_fp8w_linear_once(p.c, x, M, K, w, N, wb ? b : NULL, &modes[q], dt, yc) == RC_OK);
                        char what[96];
                        snprintf(what, sizeof what, "%s M=%lld K=%lld N=%lld %s%s", names[q], (long long)M,
                                 (long long)K, (long long)N, dt_name(dt), wb ? " +bias" : "");
                        compare(kk ? "fp8_linear_invariant" : "fp8_linear_engine", what, yt, yc, M * N, dt);
                        free(x), free(w), free(b), free(yt), free(yc);
                    }
        free_pair(&p);
    }
    end_checks();
}
END_TEST

/* The fp8 kernels' arguments checked: a group quantization over a K that is
 * no multiple of 128, an unknown epilogue step and a slice past the last are
 * RC_ERR_INTERNAL, not a launch. */
START_TEST(test_fp8w_refused)
{
    rc_backend *be;
    ck_assert_msg(test_backend_create(RC_KERNELS_INVARIANT, &be) == RC_OK, "%s", rc_last_error());
    ck_assert(be->ops->fp8_quant_act && be->ops->fp8_epilogue);
    float *buf;
    ck_assert(be->ops->alloc(be, 1024, &buf) == RC_OK);
    ck_assert_int_eq(be->ops->fp8_quant_act(be, buf, 2, 100, RC_FP8_ACT_GROUP, buf + 256, buf + 512), RC_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "fp8 activations"));
    rc_fp8_epi e = {.kind = RC_FP8_EPI_BLOCK_ACC, .y = buf, .part = buf + 256, .sx = buf + 512, .sw = buf + 768,
                    .M = 2, .N = 4, .kb = 2, .k = 2};
    ck_assert_int_eq(be->ops->fp8_epilogue(be, &e), RC_ERR_INTERNAL);
    /* 3 is outside the enumerators but inside the enum's value range in C++
     * (two bits), so the host build under UBSan may load it (7 may not) */
    e.kind = (rc_fp8_epi_kind)3;
    e.k = 0;
    ck_assert_int_eq(be->ops->fp8_epilogue(be, &e), RC_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "fp8 epilogue"));
    be->ops->free(be, buf);
    rc_backend_destroy(be);
}
END_TEST

/* attention shapes: heads, kv heads (GQA ratio), head_dim, rotary dims,
 * sliding window, prompt lengths of the sequences */
typedef struct {
    int64_t nh, nkv, d, rot, window;
    int64_t n_seq;
    int64_t len[4];
    int rope_f32; /* Baichuan2-7B: cos/sin and the products in fp32, the sum rounded */
} attn_shape;

static const attn_shape k_attn_shapes[] = {
    {4, 4, 16, 16, 0, 2, {5, 9}, 0},     /* MHA, full rotary */
    {8, 2, 32, 8, 0, 3, {1, 7, 70}, 0},  /* GQA 4:1, partial rotary, > one prefill tile */
    {6, 3, 24, 24, 5, 2, {12, 3}, 0},    /* GQA 2:1, sliding window */
    {2, 1, 64, 64, 0, 1, {300}, 0},      /* long: many decode chunks and prefill tiles */
    {3, 1, 20, 0, 0, 4, {2, 2, 33, 1}, 0}, /* no rotary, odd head_dim */
    {4, 4, 16, 16, 0, 2, {5, 9}, 1},     /* MHA, full rotary in fp32, one rounding (Baichuan2-7B) */
};

/* rows for a step: sequence b adds n_new[b] tokens at start[b] */
typedef struct {
    rc_batch_desc bd;
    int64_t slot[4], start[4], n_new[4], row0[4];
    int64_t *pos, *seq;
} step_desc;

static void make_step(step_desc *s, int64_t n_seq, const int64_t *start, const int64_t *n_new)
{
    int64_t R = 0;
    for (int64_t b = 0; b < n_seq; b++) {
        s->slot[b] = n_seq - 1 - b; /* slot != batch index */
        s->start[b] = start[b];
        s->n_new[b] = n_new[b];
        s->row0[b] = R;
        R += n_new[b];
    }
    s->pos = malloc((size_t)R * sizeof *s->pos);
    s->seq = malloc((size_t)R * sizeof *s->seq);
    for (int64_t b = 0; b < n_seq; b++)
        for (int64_t i = 0; i < n_new[b]; i++) {
            s->pos[s->row0[b] + i] = start[b] + i;
            s->seq[s->row0[b] + i] = b;
        }
    s->bd = (rc_batch_desc){n_seq, s->slot, s->start, s->n_new, s->row0, R, s->pos, s->seq, 0, 0};
}

/* ALiBi in the attention kernel, MPT's clamp and NormHead's row
 * normalisation against their CPU twins: the three families' ways of adding
 * the bias (BLOOM fused into the scaling, Baichuan added in the model dtype
 * after a division, MPT in fp32 from the last key) and --alibi-bias rowmax,
 * 6 heads (not a power of two), prefill then decode then a 2-token step. */
/* Gated DeltaNet's recurrent decode step (gdn.cu) against its CPU twin (src/engine/gdn.c): 3 sequences,
 * 2 key heads and 4 value heads (GQA), head dims 12 / 10 and 20 / 40 (the sums over dk of 40 columns take
 * the grouped order for the first 32), 5 steps from a random state, the state kept in fp32 and in the
 * dtype. */
START_TEST(test_gdn_ops)
{
    begin_checks();
    pair p = make_pair(RC_KERNELS_ENGINE);
    const int64_t dims[2][2] = {{12, 10}, {20, 40}};
    for (int di = 0; di < 3; di++)
        for (int c = 0; c < 2; c++)
            for (int sd = 0; sd < (k_dts[di] == RC_F32 ? 1 : 2); sd++) {
                const rc_dtype dt = k_dts[di], sdt = sd ? dt : RC_F32;
                const rc_gdn_dims d = {2, 4, dims[c][0], dims[c][1]};
                enum { N = 3, STEPS = 5 };
                const int64_t nq = N * d.hk * d.dk, nv = N * d.hv * d.dv, ng = N * d.hv, ns = N * d.hv * d.dk * d.dv;
                float *st = rand_vec(ns, 0.5f, sdt), *dst = dev_copy(p.t, st, ns), *dout;
                float *o = malloc(sizeof(float) * (size_t)nv);
                ck_assert(p.t->ops->alloc(p.t, nv, &dout) == RC_OK);
                for (int t = 0; t < STEPS; t++) {
                    float *q = rand_vec(nq, 1.0f, dt), *k = rand_vec(nq, 1.0f, dt), *v = rand_vec(nv, 1.0f, dt);
                    float *g = rand_vec(ng, 1.0f, RC_F32), *beta = rand_vec(ng, 0.5f, dt);
                    for (int64_t i = 0; i < ng; i++) {
                        g[i] = -fabsf(g[i]) * (float)(1 + (i % 3) * 4); /* decays from slow to fast */
                        beta[i] = rc_round_to(0.5f + beta[i], dt);
                    }
                    float *dq = dev_copy(p.t, q, nq), *dk = dev_copy(p.t, k, nq), *dv = dev_copy(p.t, v, nv);
                    float *dg = dev_copy(p.t, g, ng), *db = dev_copy(p.t, beta, ng);
                    ck_assert_msg(p.t->ops->gdn_step(p.t, &d, dq, dk, dv, dg, db, N, dt, sdt, dst, dout) == RC_OK,
                                  "%s", rc_last_error());
                    ck_assert(p.c->ops->gdn_step(p.c, &d, q, k, v, g, beta, N, dt, sdt, st, o) == RC_OK);
                    float *go = host_copy(p.t, dout, nv);
                    char what[64];
                    snprintf(what, sizeof what, "%s dk %lld dv %lld state %s step %d", dt_name(dt), (long long)d.dk,
                             (long long)d.dv, dt_name(sdt), t);
                    compare("gdn_step", what, go, o, nv, dt);
                    free(go), free(q), free(k), free(v), free(g), free(beta);
                    p.t->ops->free(p.t, dq), p.t->ops->free(p.t, dk), p.t->ops->free(p.t, dv);
                    p.t->ops->free(p.t, dg), p.t->ops->free(p.t, db);
                }
                float *gs = host_copy(p.t, dst, ns);
                char what[64];
                snprintf(what, sizeof what, "%s dk %lld dv %lld, final state %s", dt_name(dt), (long long)d.dk,
                         (long long)d.dv, dt_name(sdt));
                compare("gdn_step", what, gs, st, ns, sdt);
                free(gs), free(st), free(o);
                p.t->ops->free(p.t, dst), p.t->ops->free(p.t, dout);
            }
    free_pair(&p);
    end_checks();
}
END_TEST

/* The MoE ops (moe.cu) against their CPU twins (src/engine/moe.c): routing
 * (the experts exactly, the weights), the weighted accumulation of one
 * expert's rows and Qwen2-MoE's sigmoid-gated shared expert. */
START_TEST(test_moe_ops)
{
    begin_checks();
    pair p = make_pair(RC_KERNELS_ENGINE);
    for (int di = 0; di < 3; di++)
        for (int renorm = 0; renorm < 2; renorm++) {
            const rc_dtype dt = k_dts[di], w_dt = renorm ? RC_F32 : dt; /* Mixtral keeps fp32 weights */
            enum { M = 23 };
            const int64_t E = 7, k = 3, H = 40;
            float *lg = rand_vec(M * E, 3.0f, dt), *dlg = dev_copy(p.t, lg, M * E), *dsel, *dw;
            ck_assert(p.t->ops->alloc(p.t, M * k, &dsel) == RC_OK);
            ck_assert(p.t->ops->alloc(p.t, M * k, &dw) == RC_OK);
            float *sel = malloc(sizeof(float) * M * k), *w = malloc(sizeof(float) * M * k);
            ck_assert_msg(p.t->ops->moe_route(p.t, dlg, M, E, k, renorm, w_dt, dsel, dw) == RC_OK, "%s",
                          rc_last_error());
            ck_assert(p.c->ops->moe_route(p.c, lg, M, E, k, renorm, w_dt, sel, w) == RC_OK);
            float *gsel = host_copy(p.t, dsel, M * k), *gw = host_copy(p.t, dw, M * k);
            for (int64_t i = 0; i < M * k; i++)
                ck_assert_msg(gsel[i] == sel[i], "moe_route %s: row %lld slot %lld expert %g, CPU %g", dt_name(dt),
                              (long long)(i / k), (long long)(i % k), (double)gsel[i], (double)sel[i]);
            compare("moe_route", dt_name(dt), gw, w, M * k, w_dt);
            /* expert 0's rows, every third row, into an output that already holds values */
            int64_t rows[M], widx[M], m = 0;
            for (int64_t r = 0; r < M; r += 3, m++) {
                rows[m] = r;
                widx[m] = r * k + (r % k);
            }
            float *y = rand_vec(m * H, 2.0f, dt), *out = rand_vec(M * H, 1.0f, dt);
            float *dy = dev_copy(p.t, y, m * H), *dout = dev_copy(p.t, out, M * H);
            ck_assert(p.t->ops->moe_accumulate(p.t, dy, m, H, rows, dw, widx, false, dt, dout) == RC_OK);
            ck_assert(p.c->ops->moe_accumulate(p.c, y, m, H, rows, gw, widx, false, dt, out) == RC_OK);
            float *g = host_copy(p.t, dout, M * H);
            compare("moe_accumulate", dt_name(dt), g, out, M * H, dt);
            free(g);
            /* the shared expert: every row, gate logits through the sigmoid */
            int64_t iota[M];
            for (int64_t r = 0; r < M; r++)
                iota[r] = r;
            float *sy = rand_vec(M * H, 2.0f, dt), *sg = rand_vec(M, 4.0f, dt);
            float *dsy = dev_copy(p.t, sy, M * H), *dsg = dev_copy(p.t, sg, M);
            ck_assert(p.t->ops->moe_accumulate(p.t, dsy, M, H, iota, dsg, iota, true, dt, dout) == RC_OK);
            ck_assert(p.c->ops->moe_accumulate(p.c, sy, M, H, iota, sg, iota, true, dt, out) == RC_OK);
            g = host_copy(p.t, dout, M * H);
            compare("moe_shared", dt_name(dt), g, out, M * H, dt);
            free(g), free(lg), free(sel), free(w), free(gsel), free(gw), free(y), free(out), free(sy), free(sg);
            p.t->ops->free(p.t, dlg), p.t->ops->free(p.t, dsel), p.t->ops->free(p.t, dw);
            p.t->ops->free(p.t, dy), p.t->ops->free(p.t, dout), p.t->ops->free(p.t, dsy), p.t->ops->free(p.t, dsg);
        }
    free_pair(&p);
    end_checks();
}
END_TEST

/* Gemma's ops: the embedding scale and the logit soft-capping in place, and
 * attention with soft-capped scores, query_pre_attn_scalar's scale and a
 * sliding window shorter than the keys (no positions: the scores alone) */
START_TEST(test_scale_softcap)
{
    begin_checks();
    for (int k = 0; k < 2; k++) {
        pair p = make_pair(k ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE);
        for (int di = 0; di < 3; di++) {
            const rc_dtype dt = k_dts[di];
            const int64_t n = 1031;
            float *x = rand_vec(n, 40.0f, dt), *dx = dev_copy(p.t, x, n), *y = malloc((size_t)n * sizeof *y);
            memcpy(y, x, (size_t)n * sizeof *y);
            float *dy = dev_copy(p.t, y, n);
            const float sc = rc_round_to((float)sqrt(48.0), dt);
            ck_assert(p.t->ops->scale(p.t, dx, n, sc, dt) == RC_OK);
            ck_assert(p.c->ops->scale(p.c, x, n, sc, dt) == RC_OK);
            float *g = host_copy(p.t, dx, n);
            compare("scale", dt_name(dt), g, x, n, dt);
            free(g);
            ck_assert(p.t->ops->softcap(p.t, dy, n, 30.0f, dt) == RC_OK);
            ck_assert(p.c->ops->softcap(p.c, y, n, 30.0f, dt) == RC_OK);
            g = host_copy(p.t, dy, n);
            compare("softcap", dt_name(dt), g, y, n, dt);
            free(g), free(x), free(y);
            p.t->ops->free(p.t, dx), p.t->ops->free(p.t, dy);

            rc_config cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.n_heads = 4, cfg.n_kv_heads = 2, cfg.head_dim = 14, cfg.n_layers = 1;
            cfg.pos = RC_POS_LEARNED; /* no RoPE: the scores as the kernels form them */
            cfg.softmax_scale = pow(20.0, -0.5);
            cfg.attn_softcap = 1.5;
            cfg.sliding_window = 5;
            const rc_attn_numerics an = {dt, dt, dt};
            const rc_attn_params ap = rc_attn_params_from_config(&cfg, NULL, dt, dt, &an);
            const int64_t n_seq = 2, len[2] = {23, 7}, T = 32, d = 14, nh = 4, nkv = 2;
            rc_kv_cache ckv = {1, n_seq, nkv, T, d, RC_F32, NULL, NULL, NULL, NULL, RC_KV_AUTO, 1.0f, 1.0f, dt},
                        tkv = ckv;
            const int64_t kvn = n_seq * nkv * T * d;
            ckv.k = calloc((size_t)kvn, sizeof(float));
            ckv.v = calloc((size_t)kvn, sizeof(float));
            float *zero = calloc((size_t)kvn, sizeof(float));
            tkv.k = dev_copy(p.t, zero, kvn);
            tkv.v = dev_copy(p.t, zero, kvn);
            const int64_t row_len = (nh + 2 * nkv) * d;
            for (int step = 0; step < 3; step++) { /* prefill, one decode token, two */
                int64_t start[2], n_new[2];
                for (int64_t b = 0; b < n_seq; b++) {
                    int64_t first = len[b] - 3;
                    start[b] = step == 0 ? 0 : step == 1 ? first : first + 1;
                    n_new[b] = step == 0 ? first : step == 1 ? 1 : 2;
                }
                step_desc sd;
                make_step(&sd, n_seq, start, n_new);
                const int64_t R = sd.bd.n_rows;
                float *qkv = rand_vec(R * row_len, 3.0f, dt);
                float *dq = dev_copy(p.t, qkv, R * row_len), *dout;
                ck_assert(p.t->ops->alloc(p.t, R * nh * d, &dout) == RC_OK);
                float *cout = malloc((size_t)(R * nh * d) * sizeof *cout);
                ck_assert_msg(p.t->ops->attention(p.t, dq, &sd.bd, &ap, &tkv, 0, dout) == RC_OK, "%s",
                              rc_last_error());
                ck_assert(p.c->ops->attention(p.c, qkv, &sd.bd, &ap, &ckv, 0, cout) == RC_OK);
                g = host_copy(p.t, dout, R * nh * d);
                char what[96];
                snprintf(what, sizeof what, "%s softcap step %d %s", rc_kernels_name(p.t->kernels), step,
                         dt_name(dt));
                compare("attention_softcap", what, g, cout, R * nh * d, dt);
                free(g);
                p.t->ops->free(p.t, dq), p.t->ops->free(p.t, dout);
                free(qkv), free(cout), free(sd.pos), free(sd.seq);
            }
            p.t->ops->free(p.t, tkv.k), p.t->ops->free(p.t, tkv.v);
            free(ckv.k), free(ckv.v), free(zero);
        }
        free_pair(&p);
    }
    end_checks();
}
END_TEST

START_TEST(test_alibi_clamp_normalize)
{
    begin_checks();
    for (int k = 0; k < 2; k++) {
        pair p = make_pair(k ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE);
        for (int variant = 0; variant < 4; variant++)
            for (int di = 0; di < 3; di++) {
                const rc_dtype dt = k_dts[di];
                rc_config cfg;
                memset(&cfg, 0, sizeof cfg);
                cfg.n_heads = 6, cfg.n_kv_heads = 6, cfg.head_dim = 16, cfg.n_layers = 1;
                cfg.pos = RC_POS_ALIBI;
                cfg.alibi_slopes = variant == 2 ? RC_SLOPES_MPT : variant == 1 ? RC_SLOPES_BAICHUAN : RC_SLOPES_BLOOM;
                cfg.alibi_bias_max = 8.0;
                cfg.alibi_add = variant == 0 || variant == 3 ? RC_ALIBI_ADD_FUSED
                                : variant == 1                ? RC_ALIBI_ADD_MODEL_DT
                                                              : RC_ALIBI_ADD_F32;
                cfg.alibi_from_last_key = variant == 2;
                cfg.score_div = variant == 1;
                float slopes[6];
                rc_alibi_slopes_compute(&cfg, slopes, NULL);
                float *dslopes = dev_copy(p.t, slopes, 6);
                const rc_attn_numerics an = {dt, dt, dt};
                rc_attn_params cap = rc_attn_params_from_config(&cfg, NULL, dt, dt, &an), tap = cap;
                rc_attn_params_set_alibi(&cap, slopes, variant == 3);
                rc_attn_params_set_alibi(&tap, dslopes, variant == 3);
                const int64_t n_seq = 2, len[2] = {40, 7}, T = 48, d = 16, nh = 6;
                /* variant 3 also stores the keys and values as an fp8 cache (kv-cache=fp8_e4m3, scale
                 * 0.5): the kernel's store against the CPU's (rco_kv_value) */
                rc_kv_cache ckv = {1, n_seq, nh, T, d, RC_F32, NULL, NULL, NULL, NULL,
                                   variant == 3 ? RC_KV_FP8_E4M3 : RC_KV_AUTO, 0.5f, 0.5f, dt}, tkv = ckv;
                const int64_t kvn = n_seq * nh * T * d;
                ckv.k = calloc((size_t)kvn, sizeof(float));
                ckv.v = calloc((size_t)kvn, sizeof(float));
                float *zero = calloc((size_t)kvn, sizeof(float));
                tkv.k = dev_copy(p.t, zero, kvn);
                tkv.v = dev_copy(p.t, zero, kvn);
                const int64_t row_len = 3 * nh * d;
                for (int step = 0; step < 3; step++) {
                    int64_t start[2], n_new[2];
                    for (int64_t b = 0; b < n_seq; b++) {
                        int64_t first = len[b] - 3;
                        start[b] = step == 0 ? 0 : step == 1 ? first : first + 1;
                        n_new[b] = step == 0 ? first : step == 1 ? 1 : 2;
                    }
                    step_desc sd;
                    make_step(&sd, n_seq, start, n_new);
                    const int64_t R = sd.bd.n_rows;
                    float *qkv = rand_vec(R * row_len, 2.0f, dt);
                    float *dq = dev_copy(p.t, qkv, R * row_len), *dout;
                    ck_assert(p.t->ops->alloc(p.t, R * nh * d, &dout) == RC_OK);
                    float *cout = malloc((size_t)(R * nh * d) * sizeof *cout);
                    ck_assert_msg(p.t->ops->attention(p.t, dq, &sd.bd, &tap, &tkv, 0, dout) == RC_OK, "%s",
                                  rc_last_error());
                    ck_assert(p.c->ops->attention(p.c, qkv, &sd.bd, &cap, &ckv, 0, cout) == RC_OK);
                    float *g = host_copy(p.t, dout, R * nh * d);
                    char what[96];
                    snprintf(what, sizeof what, "%s ALiBi variant %d step %d %s", rc_kernels_name(p.t->kernels),
                             variant, step, dt_name(dt));
                    compare("attention_alibi", what, g, cout, R * nh * d, dt);
                    free(g);
                    p.t->ops->free(p.t, dq), p.t->ops->free(p.t, dout);
                    free(qkv), free(cout), free(sd.pos), free(sd.seq);
                }
                p.t->ops->free(p.t, tkv.k), p.t->ops->free(p.t, tkv.v), p.t->ops->free(p.t, dslopes);
                free(ckv.k), free(ckv.v), free(zero);
            }
        /* clamp (exact) and NormHead rows */
        for (int di = 0; di < 3; di++) {
            const rc_dtype dt = k_dts[di];
            const int64_t M = 9, H = 40;
            float *x = rand_vec(M * H, 3.0f, dt), *dx = dev_copy(p.t, x, M * H);
            ck_assert(p.t->ops->clamp(p.t, dx, M * H, 0.75f) == RC_OK);
            ck_assert(p.c->ops->clamp(p.c, x, M * H, 0.75f) == RC_OK);
            float *g = host_copy(p.t, dx, M * H);
            compare("clamp", dt_name(dt), g, x, M * H, RC_F32);
            free(g);
            float *w = rand_vec(M * H, 0.5f, dt), *dw = dev_copy(p.t, w, M * H), *dn, *cn = malloc(sizeof(float) * M * H);
            ck_assert(p.t->ops->alloc(p.t, M * H, &dn) == RC_OK);
            ck_assert(p.t->ops->normalize_rows(p.t, rc_wt_f32(dw), M, H, 1e-12f, dt, dn) == RC_OK);
            ck_assert(p.c->ops->normalize_rows(p.c, rc_wt_f32(w), M, H, 1e-12f, dt, cn) == RC_OK);
            g = host_copy(p.t, dn, M * H);
            compare("normalize_rows", dt_name(dt), g, cn, M * H, dt);
            free(g), free(x), free(w), free(cn);
            p.t->ops->free(p.t, dx), p.t->ops->free(p.t, dw), p.t->ops->free(p.t, dn);
        }
        free_pair(&p);
    }
    end_checks();
}
END_TEST

/* A buffer uploaded again (new weights in the same memory) is used with its
 * new contents by both GEMMs (no stale bf16 copy for cuBLAS, no stale
 * transposed copy for the invariant kernel). */
START_TEST(test_matmul_reupload)
{
    begin_checks();
    for (int kk = 0; kk < 2; kk++) {
        pair p = make_pair(kk ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE);
        const int64_t M = 4, K = 40, N = 24;
        float *x = rand_vec(M * K, 1.0f, RC_BF16), *dx = dev_copy(p.t, x, M * K), *dW, *dy;
        ck_assert(p.t->ops->alloc(p.t, N * K, &dW) == RC_OK);
        ck_assert(p.t->ops->alloc(p.t, M * N, &dy) == RC_OK);
        float *cW = malloc((size_t)(N * K) * sizeof *cW), *cy = malloc((size_t)(M * N) * sizeof *cy);
        for (int round = 0; round < 3; round++) {
            float *W = rand_vec(N * K, 0.3f, RC_F32);
            rc_dtype wdt = round == 1 ? RC_F32 : RC_BF16; /* bf16, then fp32 values, then bf16 again */
            ck_assert(p.t->ops->upload(p.t, W, N * K, wdt, dW) == RC_OK);
            ck_assert(p.c->ops->upload(p.c, W, N * K, wdt, cW) == RC_OK);
            rc_dtype in = wdt == RC_BF16 ? RC_BF16 : RC_F32;
            ck_assert(p.t->ops->matmul(p.t, dx, M, K, rc_wt_f32(dW), N, NULL, in, RC_BF16, dy) == RC_OK);
            ck_assert(p.c->ops->matmul(p.c, x, M, K, rc_wt_f32(cW), N, NULL, in, RC_BF16, cy) == RC_OK);
            float *g = host_copy(p.t, dy, M * N);
            char what[64];
            snprintf(what, sizeof what, "re-uploaded weights, round %d", round);
            compare(kk ? "matmul_invariant" : "matmul_engine", what, g, cy, M * N, RC_BF16);
            free(g);
            free(W);
        }
        p.t->ops->free(p.t, dx), p.t->ops->free(p.t, dW), p.t->ops->free(p.t, dy);
        free(x), free(cW), free(cy);
        free_pair(&p);
    }
    end_checks();
}
END_TEST

/* rc_attn_params that contradict themselves, and the finfo.min mask, are
 * refused by the CUDA rope and attention as by the CPU's (same codes, one
 * line), before anything runs, rather than ignored. */
START_TEST(test_attn_params_refused)
{
    pair p = make_pair(RC_KERNELS_ENGINE);
    rc_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_heads = 2, cfg.n_kv_heads = 1, cfg.head_dim = 4, cfg.rotary_dim = 4, cfg.rope_theta = 10000.0;
    const float inv[2] = {1.0f, 0.01f}, slopes[2] = {0.5f, 0.25f}, zero[16] = {0};
    float *dinv = dev_copy(p.t, inv, 2), *dslopes = dev_copy(p.t, slopes, 2);
    const rc_attn_numerics an = {RC_BF16, RC_BF16, RC_BF16};
    const rc_attn_params ok = rc_attn_params_from_config(&cfg, dinv, RC_BF16, RC_BF16, &an);
    rc_attn_params alibi = ok;
    alibi.pos = RC_ATTN_POS_ALIBI, alibi.rotary_dim = 0, alibi.inv_freq = NULL;
    rc_attn_params_set_alibi(&alibi, dslopes, false);
    rc_attn_params bad[4] = {alibi, ok, alibi, ok};
    const rc_status want[4] = {RC_ERR_INTERNAL, RC_ERR_INTERNAL, RC_ERR_INTERNAL, RC_ERR_UNSUPPORTED};
    bad[0].alibi_slopes = NULL;
    bad[1].alibi_slopes = dslopes;
    bad[2].alibi_mode = RCO_ALIBI_NONE;
    bad[3].mask = RC_MASK_FINFO_MIN;
    /* one new token at position 3 after 3 cached ones: a cache of 4 positions */
    int64_t slot = 0, start = 3, nn = 1, row0 = 0, pos = 3, seq = 0;
    const rc_batch_desc bd = {.n_seq = 1, .slot = &slot, .start = &start, .n_new = &nn, .row0 = &row0,
                              .n_rows = 1, .pos = &pos, .seq_of_row = &seq};
    float qh[16];
    for (int j = 0; j < 16; j++)
        qh[j] = 0.25f * (float)(j + 1);
    float *dq = dev_copy(p.t, qh, 16), *dout = dev_copy(p.t, zero, 8);
    rc_kv_cache kv = {.n_layers = 1, .n_slots = 1, .n_kv_heads = 1, .max_len = 4, .head_dim = 4,
                      .k = dev_copy(p.t, zero, 16), .v = dev_copy(p.t, zero, 16)};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(p.t->ops->rope(p.t, dq, &bd, &bad[i]), want[i]);
        ck_assert_msg(strchr(rc_last_error(), '\n') == NULL, "%s", rc_last_error());
        ck_assert_int_eq(p.t->ops->attention(p.t, dq, &bd, &bad[i], &kv, 0, dout), want[i]);
        ck_assert_msg(strstr(rc_last_error(), "attention") && strchr(rc_last_error(), '\n') == NULL, "%s",
                      rc_last_error());
        float *g = host_copy(p.t, dq, 16), *gk = host_copy(p.t, kv.k, 16), *go = host_copy(p.t, dout, 8);
        ck_assert(memcmp(g, qh, sizeof qh) == 0);
        for (int j = 0; j < 16; j++)
            ck_assert(gk[j] == 0.0f && (j >= 8 || go[j] == 0.0f));
        free(g), free(gk), free(go);
    }
    ck_assert_int_eq(p.t->ops->rope(p.t, dq, &bd, &ok), RC_OK);
    ck_assert_int_eq(p.t->ops->attention(p.t, dq, &bd, &ok, &kv, 0, dout), RC_OK);
    ck_assert_int_eq(p.t->ops->attention(p.t, dq, &bd, &alibi, &kv, 0, dout), RC_OK);
    p.t->ops->free(p.t, dq), p.t->ops->free(p.t, dout), p.t->ops->free(p.t, kv.k), p.t->ops->free(p.t, kv.v);
    p.t->ops->free(p.t, dinv), p.t->ops->free(p.t, dslopes);
    free_pair(&p);
}
END_TEST

START_TEST(test_rope_attention)
{
    begin_checks();
    int split_seen = 0;
#ifdef RC_TEST_EMULATE
    setenv("RC_CUDA_ATTN_SCRATCH_MB", "0.03", 1); /* small: attention split into several launches */
#endif
    for (int k = 0; k < 2; k++) {
        pair p = make_pair(k ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE);
        for (size_t si = 0; si < sizeof k_attn_shapes / sizeof k_attn_shapes[0]; si++)
            for (int di = 0; di < 3; di++) {
                const attn_shape *S = &k_attn_shapes[si];
                const rc_dtype dt = k_dts[di];
                rc_config cfg;
                memset(&cfg, 0, sizeof cfg);
                cfg.n_heads = S->nh, cfg.n_kv_heads = S->nkv, cfg.head_dim = S->d, cfg.rotary_dim = S->rot;
                cfg.sliding_window = S->window, cfg.rope_theta = 10000.0, cfg.n_layers = 2;
                float inv[64] = {0};
                for (int64_t j = 0; j < S->rot / 2; j++)
                    inv[j] = (float)pow(10000.0, -2.0 * (double)j / (double)S->rot);
                float *dinv = dev_copy(p.t, inv, S->rot / 2 > 0 ? S->rot / 2 : 1);
                int64_t T = 0;
                for (int64_t b = 0; b < S->n_seq; b++)
                    T = S->len[b] + 4 > T ? S->len[b] + 4 : T;
                /* two layers' caches; the test uses layer 1 */
                rc_kv_cache ckv = {2, S->n_seq, S->nkv, T, S->d, RC_F32, NULL, NULL, NULL, NULL, RC_KV_AUTO, 1.0f, 1.0f, RC_F32}, tkv = ckv;
                const int64_t kvn = 2 * S->n_seq * S->nkv * T * S->d;
                ckv.k = calloc((size_t)kvn, sizeof(float));
                ckv.v = calloc((size_t)kvn, sizeof(float));
                float *zero = calloc((size_t)kvn, sizeof(float));
                tkv.k = dev_copy(p.t, zero, kvn);
                tkv.v = dev_copy(p.t, zero, kvn);
                const rc_attn_numerics an = {dt, dt, dt};
                /* the same parameters for both; RoPE's table in each one's memory */
                rc_attn_params cap = rc_attn_params_from_config(&cfg, inv, dt, dt, &an);
                rc_attn_params tap = rc_attn_params_from_config(&cfg, dinv, dt, dt, &an);
                if (S->rope_f32)
                    cap.rope_cs_dt = tap.rope_cs_dt = cap.rope_mid_dt = tap.rope_mid_dt = RC_F32;
                const int64_t row_len = (S->nh + 2 * S->nkv) * S->d;
                /* step 0: prefill all but the last 3 tokens (>= 1); step 1: one
                 * decode token each; step 2: 2 more tokens each (prefill over a
                 * filled cache) */
                for (int step = 0; step < 3; step++) {
                    int64_t start[4], n_new[4];
                    for (int64_t b = 0; b < S->n_seq; b++) {
                        int64_t first = S->len[b] > 3 ? S->len[b] - 3 : 1;
                        start[b] = step == 0 ? 0 : step == 1 ? first : first + 1;
                        n_new[b] = step == 0 ? first : step == 1 ? 1 : 2;
                    }
                    step_desc sd;
                    make_step(&sd, S->n_seq, start, n_new);
                    const int64_t R = sd.bd.n_rows;
                    float *qkv = rand_vec(R * row_len, 2.0f, dt);
                    float *dq = dev_copy(p.t, qkv, R * row_len), *dout;
                    ck_assert(p.t->ops->alloc(p.t, R * S->nh * S->d, &dout) == RC_OK);
                    float *cout = malloc((size_t)(R * S->nh * S->d) * sizeof *cout);
                    char what[96];
                    ck_assert(p.t->ops->rope(p.t, dq, &sd.bd, &tap) == RC_OK);
                    ck_assert(p.c->ops->rope(p.c, qkv, &sd.bd, &cap) == RC_OK);
                    float *g = host_copy(p.t, dq, R * row_len);
                    snprintf(what, sizeof what, "heads %lld/%lld d=%lld rot=%lld step %d %s", (long long)S->nh,
                             (long long)S->nkv, (long long)S->d, (long long)S->rot, step, dt_name(dt));
                    compare("rope", what, g, qkv, R * row_len, dt);
                    free(g);
                    /* attention from identical inputs (the CPU's rotated rows) */
                    p.t->ops->free(p.t, dq);
                    dq = dev_copy(p.t, qkv, R * row_len);
#ifdef RC_TEST_EMULATE
                    long long l0 = rck_shim_get(RCK_SHIM_LAUNCHES);
#endif
                    rc_status s = p.t->ops->attention(p.t, dq, &sd.bd, &tap, &tkv, 1, dout);
                    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
#ifdef RC_TEST_EMULATE
                    if (rck_shim_get(RCK_SHIM_LAUNCHES) - l0 > 2) /* K/V store + more than one attention launch */
                        split_seen++;
#endif
                    ck_assert(p.c->ops->attention(p.c, qkv, &sd.bd, &cap, &ckv, 1, cout) == RC_OK);
                    g = host_copy(p.t, dout, R * S->nh * S->d);
                    snprintf(what, sizeof what, "%s heads %lld/%lld d=%lld win=%lld step %d %s",
                             rc_kernels_name(p.t->kernels), (long long)S->nh, (long long)S->nkv, (long long)S->d,
                             (long long)S->window, step, dt_name(dt));
                    compare("attention", what, g, cout, R * S->nh * S->d, dt);
                    free(g);
                    float *gk = host_copy(p.t, tkv.k, kvn), *gv = host_copy(p.t, tkv.v, kvn);
                    compare("kv_cache", "K after the step", gk, ckv.k, kvn, RC_F32);
                    compare("kv_cache", "V after the step", gv, ckv.v, kvn, RC_F32);
                    free(gk), free(gv);
                    p.t->ops->free(p.t, dq), p.t->ops->free(p.t, dout);
                    free(qkv), free(cout), free(sd.pos), free(sd.seq);
                }
                p.t->ops->free(p.t, tkv.k), p.t->ops->free(p.t, tkv.v), p.t->ops->free(p.t, dinv);
                free(ckv.k), free(ckv.v), free(zero);
            }
        free_pair(&p);
    }
#ifdef RC_TEST_EMULATE
    printf("%-10s attention calls split into several launches: %d\n", TEST_NAME, split_seen);
    ck_assert_msg(split_seen > 10, "the attention was split only %d times", split_seen);
    unsetenv("RC_CUDA_ATTN_SCRATCH_MB");
#else
    (void)split_seen;
#endif
    end_checks();
}
END_TEST

START_TEST(test_logprobs)
{
    begin_checks();
    pair p = make_pair(RC_KERNELS_ENGINE);
    const int64_t shapes[][2] = {{1, 7}, {3, 1000}, {5, 50304}, {2, 17}};
    const float temps[] = {1.0f, 0.7f};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int di = 0; di < 3; di++)
            for (int ti = 0; ti < 2; ti++)
                for (int same = 0; same < 2; same++) {
                    const int64_t M = shapes[si][0], V = shapes[si][1];
                    const rc_dtype dt = k_dts[di], lp = same ? dt : RC_F32;
                    float *x = rand_vec(M * V, 12.0f, dt);
                    int32_t tg[8];
                    for (int64_t r = 0; r < M; r++)
                        tg[r] = (int32_t)((r * 31 + 5) % V);
                    float *dx = dev_copy(p.t, x, M * V);
                    float *gf = malloc((size_t)(M * V) * sizeof *gf), *cf = malloc((size_t)(M * V) * sizeof *cf);
                    float gt[8], ct[8];
                    ck_assert(p.t->ops->logprobs(p.t, dx, M, V, temps[ti], lp, gf, tg, gt) == RC_OK);
                    ck_assert(p.c->ops->logprobs(p.c, x, M, V, temps[ti], lp, cf, tg, ct) == RC_OK);
                    char what[96];
                    snprintf(what, sizeof what, "M=%lld V=%lld T=%g logits %s, log-probs %s", (long long)M,
                             (long long)V, temps[ti], dt_name(dt), dt_name(lp));
                    compare("logprobs", what, gf, cf, M * V, lp);
                    compare("logprobs", "  the sampled tokens", gt, ct, M, lp);
                    /* targets only (what the full forward asks for) */
                    ck_assert(p.t->ops->logprobs(p.t, dx, M, V, temps[ti], lp, NULL, tg, gt) == RC_OK);
                    compare("logprobs", "  targets without the full rows", gt, ct, M, lp);
                    p.t->ops->free(p.t, dx);
                    free(x), free(gf), free(cf);
                }
    free_pair(&p);
    end_checks();
}
END_TEST

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
    ck_assert(rc_st_read_f32(ref, "forward_logprobs_f32", 3, (int64_t[]){B, T, V}, fwd32) == RC_OK);
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

/* A Llama whose every GEMM size is a multiple of 128 (hidden 128, 2 heads of
 * 64, 2 KV heads, intermediate 256, vocab 128, 2 layers, tied embeddings),
 * random fp32 weights, written into dir (config.json, model.safetensors):
 * what block weights need, which no fixture has. */
static void write_block_model(const char *dir)
{
    static const char *const kinds[] = {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                                        "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    static const int64_t shapes[][2] = {{128, 0}, {128, 0}, {128, 128}, {128, 128}, {128, 128},
                                        {128, 128}, {256, 128}, {256, 128}, {128, 256}};
    char path[4200], name[96], *hdr = malloc(1 << 14);
    ck_assert(hdr != NULL);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fputs("{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 128, "
          "\"intermediate_size\": 256, \"num_attention_heads\": 2, \"num_key_value_heads\": 2, \"head_dim\": 64, "
          "\"num_hidden_layers\": 2, \"vocab_size\": 128, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05, "
          "\"rope_theta\": 10000.0, \"hidden_act\": \"silu\", \"tie_word_embeddings\": true, "
          "\"attention_bias\": false, \"mlp_bias\": false, \"bos_token_id\": 1, \"eos_token_id\": 2}\n", f);
    ck_assert(fclose(f) == 0);
    /* the tensors in header order: embedding, the layers', the final norm */
    int64_t n_t = 0, off = 0, sizes[32];
    size_t h = (size_t)snprintf(hdr, 1 << 14, "{");
    for (int t = -1; t <= 2 * 9; t++) {
        int64_t r, c;
        if (t < 0)
            snprintf(name, sizeof name, "model.embed_tokens.weight"), r = 128, c = 128;
        else if (t == 18)
            snprintf(name, sizeof name, "model.norm.weight"), r = 128, c = 0;
        else
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", t / 9, kinds[t % 9]), r = shapes[t % 9][0],
                                                                                      c = shapes[t % 9][1];
        sizes[n_t++] = r * (c ? c : 1);
        if (c)
            h += (size_t)snprintf(hdr + h, (1 << 14) - h, "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [%lld, %lld], "
                                  "\"data_offsets\": [%lld, %lld]}", t < 0 ? "" : ", ", name, (long long)r,
                                  (long long)c, (long long)off, (long long)(off + 4 * r * c));
        else
            h += (size_t)snprintf(hdr + h, (1 << 14) - h, ", \"%s\": {\"dtype\": \"F32\", \"shape\": [%lld], "
                                  "\"data_offsets\": [%lld, %lld]}", name, (long long)r, (long long)off,
                                  (long long)(off + 4 * r));
        off += 4 * sizes[n_t - 1];
    }
    h += (size_t)snprintf(hdr + h, (1 << 14) - h, "}");
    while (h % 8)
        hdr[h++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    ck_assert(f != NULL);
    const uint64_t hl = h;
    ck_assert(fwrite(&hl, 8, 1, f) == 1 && fwrite(hdr, 1, h, f) == h);
    for (int64_t t = 0; t < n_t; t++) {
        const bool norm = t == n_t - 1 || (t > 0 && (t - 1) % 9 < 2);
        for (int64_t i = 0; i < sizes[t]; i++) {
            const float v = norm ? 1.0f + frand(0.1f) : frand(t == 0 ? 1.0f : 0.15f);
            ck_assert(fwrite(&v, 4, 1, f) == 1);
        }
    }
    ck_assert(fclose(f) == 0);
    free(hdr);
}

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

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* every measurement reaches the log, even if the run dies */
#ifndef RC_TEST_EMULATE
    int n;
    char name[256];
    if (rc_cuda_probe(&n, name, sizeof name) != RC_OK) {
        printf("cuda: skipped: %s\n", rc_last_error());
        return 77; /* meson: SKIP */
    }
    printf("cuda: %d device(s), testing on %s\n", n, name);
#endif
    Suite *s = suite_create(TEST_NAME);
    TCase *ops = tcase_create("op_twins");
    tcase_set_timeout(ops, 600);
    tcase_add_test(ops, test_elementwise);
    tcase_add_test(ops, test_embed_gather);
    tcase_add_test(ops, test_norm);
    tcase_add_test(ops, test_qk_norm);
    tcase_add_test(ops, test_matmul);
    tcase_add_test(ops, test_matmul_reupload);
    tcase_add_test(ops, test_rope_attention);
    tcase_add_test(ops, test_attn_params_refused);
    tcase_add_test(ops, test_alibi_clamp_normalize);
    tcase_add_test(ops, test_scale_softcap);
    tcase_add_test(ops, test_moe_ops);
    tcase_add_test(ops, test_gdn_ops);
    tcase_add_test(ops, test_logprobs);
    tcase_add_test(ops, test_fp8w_linear);
    tcase_add_test(ops, test_fp8w_refused);
    tcase_add_test(ops, test_tp_forward);
    suite_add_tcase(s, ops);
    TCase *model = tcase_create("model");
    tcase_set_timeout(model, 600);
    tcase_add_loop_test(model, test_fixture_vs_hf, 0, 2 * N_FIXTURES);
    tcase_add_loop_test(model, test_ratio_default_model, 0, 3);
    tcase_add_loop_test(model, test_autocast_twin, 0, 4);
    tcase_add_loop_test(model, test_gemma_half_twin, 0, 4);
    tcase_add_loop_test(model, test_fp8w_twin, 0, 7);
    suite_add_tcase(s, model);
    TCase *host = tcase_create("host");
    tcase_add_test(host, test_error_messages);
    tcase_add_test(host, test_create_without_device);
    tcase_add_test(host, test_launch_split);
#ifdef RC_TEST_EMULATE
    tcase_add_test(host, test_injected_faults);
    tcase_add_test(host, test_shim_checks);
    tcase_add_test(model, test_cli_cuda);
#endif
    suite_add_tcase(s, host);
#ifdef RC_TEST_EMULATE
    return rc_test_run(s);
#else
    /* no fork: the CUDA context made above does not survive fork() */
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
#endif
}
