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
#include "test_cuda.h"


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
    /* the grouped sigmoid router: expf in each score, then the renormalising sum, a division and the scale;
     * the experts chosen must agree exactly */
    {"moe_route_grouped", 0, 0, 8, 1},
    /* Gated DeltaNet's recurrent step: one expf per step (the decay) scales every state value, and the
     * sums over dk cancel: 4 fp32 ulps of the largest value; once rounded, a one-ulp flip */
    {"gdn_step", 0, 0, 4, 1},
    /* a Gated DeltaNet layer's mixer (conv, gates, the chunked or recurrent rule, the gated norm): expf in
     * the conv's SiLU, the gates, the chunk's decays and the norm's gate; the triangular solves and the
     * scan carry a flipped ulp through the chunk. The GPU bound is a guess, to be measured */
    {"gdn_mixer", 0, 0, 64, 2},
    {"gate_mul", 0, 0, 4, 1}, /* the attention output gate: one expf in the sigmoid */
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

rc_status test_backend_create(rc_kernels k, rc_backend **out) { return rc_backend_cuda_create(k, out); }

/* ---- helpers ------------------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

float frand(float scale) /* uniform in [-scale, scale) */
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

const rc_dtype k_dts[] = {RC_F32, RC_BF16, RC_F16};
const char *dt_name(rc_dtype dt) { return dt == RC_F32 ? "fp32" : dt == RC_BF16 ? "bf16" : "fp16"; }

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

/* 2-byte weights as an engine holds them on the device (forward.c plan_weight: the dtype's bit
 * patterns): the GEMM (whole and K-slice, activations in the weight's dtype and in fp32) and the
 * embedding gather against the CPU reading the same bits. Both backends widen exactly; the
 * comparison is the table's for each op. */
START_TEST(test_matmul_2byte)
{
    begin_checks();
    const int64_t shapes[][3] = {{1, 64, 48}, {3, 100, 37}, {17, 256, 129}, {300, 96, 33}, {5, 1, 7}};
    for (int k = 0; k < 2; k++) {
        pair p = make_pair(k ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int di = 1; di < 3; di++)
                for (int xf = 0; xf < 2; xf++) {
                    const int64_t M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
                    const rc_dtype dt = k_dts[di], in_dt = xf ? RC_F32 : dt;
                    ck_assert(dt == RC_BF16 || dt == RC_F16);
                    float *x = rand_vec(M * K, 1.0f, in_dt), *W = rand_vec(N * K, 0.2f, dt), *b = rand_vec(N, 1.0f, dt);
                    uint16_t *bits = calloc((size_t)(N * K + 1), sizeof *bits);
                    for (int64_t i = 0; i < N * K; i++)
                        bits[i] = dt == RC_BF16 ? rc_f32_to_bf16(W[i]) : rc_f32_to_f16(W[i]);
                    float *dW; /* the bits as the engine's arena holds them: uploaded as bytes */
                    ck_assert(p.t->ops->alloc(p.t, (N * K + 1) / 2, &dW) == RC_OK);
                    ck_assert(p.t->ops->upload(p.t, (const float *)bits, (N * K + 1) / 2, RC_F32, dW) == RC_OK);
                    const rc_wt wt = {dW, dt, false}, wc = {bits, dt, false};
                    float *dx = dev_copy(p.t, x, M * K), *db = dev_copy(p.t, b, N), *dy;
                    ck_assert(p.t->ops->alloc(p.t, M * N, &dy) == RC_OK);
                    float *cy = malloc((size_t)(M * N) * sizeof *cy);
                    rc_status s = p.t->ops->matmul(p.t, dx, M, K, wt, N, db, in_dt, dt, dy);
                    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
                    ck_assert(p.c->ops->matmul(p.c, x, M, K, wc, N, b, in_dt, dt, cy) == RC_OK);
                    float *g = host_copy(p.t, dy, M * N);
                    char what[96];
                    snprintf(what, sizeof what, "M=%lld K=%lld N=%lld %s weights at 2 bytes, %s input +bias",
                             (long long)M, (long long)K, (long long)N, dt_name(dt), dt_name(in_dt));
                    compare(k ? "matmul_invariant" : "matmul_engine", what, g, cy, M * N, dt);
                    free(g);
                    const int64_t k0 = K / 3, Ks = K - k0 - K / 5;
                    s = p.t->ops->matmul_kslice(p.t, dx, M, K, k0, Ks, wt, N, NULL, in_dt, dt, dy);
                    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
                    ck_assert(p.c->ops->matmul_kslice(p.c, x, M, K, k0, Ks, wc, N, NULL, in_dt, dt, cy) == RC_OK);
                    g = host_copy(p.t, dy, M * N);
                    snprintf(what, sizeof what, "M=%lld K=%lld [%lld, +%lld) N=%lld %s weights at 2 bytes, %s input",
                             (long long)M, (long long)K, (long long)k0, (long long)Ks, (long long)N, dt_name(dt),
                             dt_name(in_dt));
                    compare(k ? "matmul_invariant" : "matmul_engine", what, g, cy, M * N, dt);
                    if (si == 1 && xf == 0) { /* the same bits as an embedding table [N, K] */
                        int32_t tok[9];
                        for (int i = 0; i < 9; i++)
                            tok[i] = (int32_t)((i * 5 + 2) % N);
                        float *de, *ce = malloc(9 * (size_t)K * sizeof *ce);
                        ck_assert(p.t->ops->alloc(p.t, 9 * K, &de) == RC_OK);
                        ck_assert(p.t->ops->embed(p.t, tok, 9, wt, K, de) == RC_OK);
                        ck_assert(p.c->ops->embed(p.c, tok, 9, wc, K, ce) == RC_OK);
                        float *ge = host_copy(p.t, de, 9 * K);
                        compare("embed", "9 rows of a 2-byte table", ge, ce, 9 * K, RC_F32);
                        p.t->ops->free(p.t, de);
                        free(ce), free(ge);
                    }
                    p.t->ops->free(p.t, dW), p.t->ops->free(p.t, dx), p.t->ops->free(p.t, db), p.t->ops->free(p.t, dy);
                    free(x), free(W), free(b), free(bits), free(cy), free(g);
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

/* A Gated DeltaNet layer's mixer (gdn_mixer, kernels/gdn.cu) and the attention output gate (gate_mul) against
 * their CPU twins (src/engine/gdn.c): 2 key heads and 4 value heads (GQA), head dims 12 / 10 and 20 / 40, a
 * conv of 4 taps; per form (transformers' with a cache, the engine's extend, the recurrent form) a sequence in
 * three calls -- a fresh prefill of 21 tokens (chunks of 8: two whole and a padded one), a one-token call (the
 * decode step), a cached call of 9 tokens -- every output, the conv state and the recurrent state compared
 * after each call, the state kept in fp32 and in the dtype. */
START_TEST(test_gdn_mixer_ops)
{
    begin_checks();
    pair p = make_pair(RC_KERNELS_ENGINE);
    const int64_t dims[2][2] = {{12, 10}, {20, 40}}, K = 4, calls[3] = {21, 1, 9};
    for (int di = 0; di < 3; di++)
        for (int c = 0; c < 2; c++)
            for (int form = 0; form < 3; form++)
                for (int sd = 0; sd < (k_dts[di] == RC_F32 ? 1 : 2); sd++) {
                    const rc_dtype dt = k_dts[di], sdt = sd ? dt : RC_F32;
                    const rc_gdn_dims d = {2, 4, dims[c][0], dims[c][1]};
                    const int64_t C = 2 * d.hk * d.dk + d.hv * d.dv, W = C + d.hv * d.dv, B = 2 * d.hv;
                    const int64_t SN = d.hv * d.dk * d.dv, LV = d.hv * d.dv;
                    float *w = rand_vec(C * K, 0.5f, dt), *al = rand_vec(d.hv, 1.0f, dt);
                    float *db = rand_vec(d.hv, 1.0f, dt), *nw = rand_vec(d.dv, 1.0f, dt);
                    float *cs = rand_vec(C * K, 1.0f, dt), *ss = rand_vec(SN, 1.0f, sdt); /* (fresh: zeroed) */
                    float *dw = dev_copy(p.t, w, C * K), *dal = dev_copy(p.t, al, d.hv), *ddb = dev_copy(p.t, db, d.hv);
                    float *dnw = dev_copy(p.t, nw, d.dv), *dcs = dev_copy(p.t, cs, C * K), *dss = dev_copy(p.t, ss, SN);
                    for (int call = 0; call < 3; call++) {
                        const int64_t T = calls[call];
                        float *qkvz = rand_vec(T * W, 2.0f, dt), *ba = rand_vec(T * B, 2.0f, dt);
                        float *o = malloc(sizeof(float) * (size_t)(T * LV)), *dout;
                        float *dq = dev_copy(p.t, qkvz, T * W), *dba = dev_copy(p.t, ba, T * B);
                        ck_assert(p.t->ops->alloc(p.t, T * LV, &dout) == RC_OK);
                        rc_gdn_mixer_args a = {d, dq, dba, T, dw, K, dal, ddb, dnw, 1e-6f, 8, dt, sdt, call == 0,
                                               (rc_gdn_form)form, dcs, dss, dout};
                        ck_assert_msg(p.t->ops->gdn_mixer(p.t, &a) == RC_OK, "%s", rc_last_error());
                        a = (rc_gdn_mixer_args){d, qkvz, ba, T, w, K, al, db, nw, 1e-6f, 8, dt, sdt, call == 0,
                                                (rc_gdn_form)form, cs, ss, o};
                        ck_assert_msg(p.c->ops->gdn_mixer(p.c, &a) == RC_OK, "%s", rc_last_error());
                        float *go = host_copy(p.t, dout, T * LV), *gc = host_copy(p.t, dcs, C * K);
                        float *gs = host_copy(p.t, dss, SN);
                        char what[96];
                        snprintf(what, sizeof what, "%s dk %lld dv %lld form %d state %s call %d (%lld tokens)",
                                 dt_name(dt), (long long)d.dk, (long long)d.dv, form, dt_name(sdt), call, (long long)T);
                        compare("gdn_mixer", what, go, o, T * LV, dt);
                        compare("gdn_mixer", "conv state", gc, cs, C * K, dt);
                        compare("gdn_mixer", "recurrent state", gs, ss, SN, sdt);
                        free(go), free(gc), free(gs), free(qkvz), free(ba), free(o);
                        p.t->ops->free(p.t, dq), p.t->ops->free(p.t, dba), p.t->ops->free(p.t, dout);
                    }
                    free(w), free(al), free(db), free(nw), free(cs), free(ss);
                    p.t->ops->free(p.t, dw), p.t->ops->free(p.t, dal), p.t->ops->free(p.t, ddb);
                    p.t->ops->free(p.t, dnw), p.t->ops->free(p.t, dcs), p.t->ops->free(p.t, dss);
                }
    for (int di = 0; di < 3; di++) { /* the output gate: the sigmoid in the GEMM's dtype, the product in the dtype */
        const int64_t n = 1000;
        float *x = rand_vec(n, 4.0f, k_dts[di]), *g = rand_vec(n, 8.0f, k_dts[di]);
        float *dx = dev_copy(p.t, x, n), *dg = dev_copy(p.t, g, n);
        ck_assert(p.t->ops->gate_mul(p.t, dx, dg, n, k_dts[di], k_dts[di]) == RC_OK);
        ck_assert(p.c->ops->gate_mul(p.c, x, g, n, k_dts[di], k_dts[di]) == RC_OK);
        float *gx = host_copy(p.t, dx, n);
        compare("gate_mul", dt_name(k_dts[di]), gx, x, n, k_dts[di]);
        free(gx), free(x), free(g);
        p.t->ops->free(p.t, dx), p.t->ops->free(p.t, dg);
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

/* The grouped sigmoid router (moe.cu) against its CPU twin: the experts
 * exactly, the weights; with and without the bias, renormalised or not, fp32
 * weights (transformers) and weights rounded to the dtype */
START_TEST(test_moe_grouped_ops)
{
    begin_checks();
    pair p = make_pair(RC_KERNELS_ENGINE);
    for (int di = 0; di < 3; di++)
        for (int v = 0; v < 4; v++) {
            const rc_dtype dt = k_dts[di];
            enum { M = 29 };
            const int64_t E = 24, k = 5;
            const rco_grouped_router g = {E, k, v < 2 ? 4 : 1, v < 2 ? 2 : 1, v != 1, v == 3 ? 1.0f : 2.5f,
                                          v == 2 ? dt : RC_F32};
            float *lg = rand_vec(M * E, 3.0f, RC_F32), *bias = rand_vec(E, 0.1f, RC_F32);
            float *dlg = dev_copy(p.t, lg, M * E), *dbias = dev_copy(p.t, bias, E), *dsel, *dw;
            ck_assert(p.t->ops->alloc(p.t, M * k, &dsel) == RC_OK);
            ck_assert(p.t->ops->alloc(p.t, M * k, &dw) == RC_OK);
            float *sel = malloc(sizeof(float) * M * k), *w = malloc(sizeof(float) * M * k);
            const float *b = v == 3 ? NULL : bias, *db = v == 3 ? NULL : dbias;
            ck_assert_msg(p.t->ops->moe_route_grouped(p.t, dlg, db, M, &g, dsel, dw) == RC_OK, "%s",
                          rc_last_error());
            ck_assert(p.c->ops->moe_route_grouped(p.c, lg, b, M, &g, sel, w) == RC_OK);
            float *gsel = host_copy(p.t, dsel, M * k), *gw = host_copy(p.t, dw, M * k);
            for (int64_t i = 0; i < M * k; i++)
                ck_assert_msg(gsel[i] == sel[i], "moe_route_grouped %d: row %lld slot %lld expert %g, CPU %g", v,
                              (long long)(i / k), (long long)(i % k), (double)gsel[i], (double)sel[i]);
            char what[64];
            snprintf(what, sizeof what, "%s, case %d", dt_name(g.w_dt), v);
            compare("moe_route_grouped", what, gw, w, M * k, g.w_dt);
            free(lg), free(bias), free(sel), free(w), free(gsel), free(gw);
            p.t->ops->free(p.t, dlg), p.t->ops->free(p.t, dbias), p.t->ops->free(p.t, dsel), p.t->ops->free(p.t, dw);
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

/* The attention over a KV cache held at 2 bytes (k16 / v16: the kernel widens each key and value element where
 * it reads it) against the same attention over the same values held fp32, on the same backend: bitwise, with
 * the CPU twin over the same 2-byte cache bitwise too. Every attention shape above (GQA, several sequences of
 * different lengths, a sliding window, an odd head_dim, a long one), each plain, with ALiBi (BLOOM's) and with
 * soft-capped scores; layer 1 of two; prefill, one decode token, two more; bf16 and fp16; the attention split
 * into several launches; both kernel strategies. */
START_TEST(test_attention_kv16)
{
    begin_checks();
#ifdef RC_TEST_EMULATE
    setenv("RC_CUDA_ATTN_SCRATCH_MB", "0.03", 1);
#endif
    int64_t calls = 0, diff_out = 0, diff_cpu = 0, diff_kv = 0;
    char first[160] = "";
    for (int k = 0; k < 2; k++) {
        pair p = make_pair(k ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE);
        for (size_t si = 0; si < sizeof k_attn_shapes / sizeof k_attn_shapes[0]; si++)
            for (int variant = 0; variant < 3; variant++)
                for (int di = 1; di < 3; di++) {
                    const attn_shape *S = &k_attn_shapes[si];
                    const rc_dtype dt = k_dts[di];
                    const int64_t nh = S->nh, nkv = S->nkv, d = S->d, n_seq = S->n_seq;
                    rc_config cfg;
                    memset(&cfg, 0, sizeof cfg);
                    cfg.n_heads = nh, cfg.n_kv_heads = nkv, cfg.head_dim = d, cfg.n_layers = 2;
                    cfg.sliding_window = S->window;
                    cfg.pos = RC_POS_LEARNED; /* the scores alone: RoPE is its own op (test_rope_attention) */
                    if (variant == 1) {
                        cfg.pos = RC_POS_ALIBI;
                        cfg.alibi_slopes = RC_SLOPES_BLOOM;
                        cfg.alibi_add = RC_ALIBI_ADD_FUSED;
                    } else if (variant == 2) {
                        cfg.softmax_scale = pow(20.0, -0.5);
                        cfg.attn_softcap = 1.5;
                    }
                    const rc_attn_numerics an = {dt, dt, dt};
                    rc_attn_params cap = rc_attn_params_from_config(&cfg, NULL, dt, dt, &an), tap = cap;
                    float slopes[8], *dslopes = NULL;
                    if (variant == 1) {
                        rc_alibi_slopes_compute(&cfg, slopes, NULL);
                        dslopes = dev_copy(p.t, slopes, nh);
                        rc_attn_params_set_alibi(&cap, slopes, false);
                        rc_attn_params_set_alibi(&tap, dslopes, false);
                    }
                    int64_t T = 0;
                    for (int64_t b = 0; b < n_seq; b++)
                        T = S->len[b] + 4 > T ? S->len[b] + 4 : T;
                    const int64_t kvn = 2 * n_seq * nkv * T * d, kvf = (kvn + 1) / 2; /* 2-byte: kvf floats */
                    rc_kv_cache t32 = {2, n_seq, nkv, T, d, RC_F32, NULL, NULL, NULL, NULL, RC_KV_AUTO, 1.0f, 1.0f,
                                       dt},
                                t16 = t32, c16 = t32;
                    t16.dt = c16.dt = dt;
                    float *zero = calloc((size_t)kvn, sizeof(float));
                    t32.k = dev_copy(p.t, zero, kvn), t32.v = dev_copy(p.t, zero, kvn);
                    t16.k16 = (uint16_t *)dev_copy(p.t, zero, kvf), t16.v16 = (uint16_t *)dev_copy(p.t, zero, kvf);
                    c16.k16 = calloc((size_t)kvn, sizeof(uint16_t)), c16.v16 = calloc((size_t)kvn, sizeof(uint16_t));
                    const int64_t row_len = (nh + 2 * nkv) * d;
                    for (int step = 0; step < 3; step++) {
                        int64_t start[4], n_new[4];
                        for (int64_t b = 0; b < n_seq; b++) {
                            int64_t f = S->len[b] > 3 ? S->len[b] - 3 : 1;
                            start[b] = step == 0 ? 0 : step == 1 ? f : f + 1;
                            n_new[b] = step == 0 ? f : step == 1 ? 1 : 2;
                        }
                        step_desc sd;
                        make_step(&sd, n_seq, start, n_new);
                        const int64_t R = sd.bd.n_rows, no = R * nh * d;
                        float *qkv = rand_vec(R * row_len, 2.0f, dt), *dq = dev_copy(p.t, qkv, R * row_len);
                        float *d16, *d32, *cout = malloc((size_t)no * sizeof *cout);
                        ck_assert(p.t->ops->alloc(p.t, no, &d16) == RC_OK && p.t->ops->alloc(p.t, no, &d32) == RC_OK);
                        rc_status st = p.t->ops->attention(p.t, dq, &sd.bd, &tap, &t16, 1, d16);
                        ck_assert_msg(st == RC_OK, "%s", rc_last_error());
                        st = p.t->ops->attention(p.t, dq, &sd.bd, &tap, &t32, 1, d32);
                        ck_assert_msg(st == RC_OK, "%s", rc_last_error());
                        ck_assert_msg(p.c->ops->attention(p.c, qkv, &sd.bd, &cap, &c16, 1, cout) == RC_OK, "%s",
                                      rc_last_error());
                        float *g16 = host_copy(p.t, d16, no), *g32 = host_copy(p.t, d32, no);
                        uint16_t *gk = (uint16_t *)host_copy(p.t, (float *)t16.k16, kvf);
                        uint16_t *gv = (uint16_t *)host_copy(p.t, (float *)t16.v16, kvf);
                        float *fk = host_copy(p.t, t32.k, kvn), *fv = host_copy(p.t, t32.v, kvn);
                        int64_t bad_kv = 0;
                        for (int64_t i = 0; i < kvn; i++) {
                            const float wk = dt == RC_BF16 ? rc_bf16_to_f32(gk[i]) : rc_f16_to_f32(gk[i]);
                            const float wv = dt == RC_BF16 ? rc_bf16_to_f32(gv[i]) : rc_f16_to_f32(gv[i]);
                            bad_kv += memcmp(&wk, fk + i, sizeof wk) != 0 || memcmp(&wv, fv + i, sizeof wv) != 0;
                        }
                        const bool bad_out = memcmp(g16, g32, (size_t)no * sizeof *g16) != 0;
                        const bool bad_cpu = memcmp(g16, cout, (size_t)no * sizeof *g16) != 0;
                        diff_kv += bad_kv > 0, diff_out += bad_out, diff_cpu += bad_cpu;
                        calls++;
                        if ((bad_kv || bad_out || bad_cpu) && !first[0])
                            snprintf(first, sizeof first,
                                     "%s heads %lld/%lld d=%lld win=%lld variant %d step %d %s: out %s, cpu %s, "
                                     "cache %lld",
                                     rc_kernels_name(p.t->kernels), (long long)nh, (long long)nkv, (long long)d,
                                     (long long)S->window, variant, step, dt_name(dt), bad_out ? "differs" : "same",
                                     bad_cpu ? "differs" : "same", (long long)bad_kv);
                        free(g16), free(g32), free(gk), free(gv), free(fk), free(fv);
                        p.t->ops->free(p.t, dq), p.t->ops->free(p.t, d16), p.t->ops->free(p.t, d32);
                        free(qkv), free(cout), free(sd.pos), free(sd.seq);
                    }
                    p.t->ops->free(p.t, t32.k), p.t->ops->free(p.t, t32.v);
                    p.t->ops->free(p.t, (float *)t16.k16), p.t->ops->free(p.t, (float *)t16.v16);
                    if (dslopes)
                        p.t->ops->free(p.t, dslopes);
                    free(c16.k16), free(c16.v16), free(zero);
                }
        free_pair(&p);
    }
#ifdef RC_TEST_EMULATE
    unsetenv("RC_CUDA_ATTN_SCRATCH_MB");
#endif
    printf("%-10s attention over a 2-byte KV cache: %lld calls; outputs differing from the fp32 cache's %lld, from "
           "the CPU's 2-byte cache's %lld; caches differing %lld%s%s\n",
           TEST_NAME, (long long)calls, (long long)diff_out, (long long)diff_cpu, (long long)diff_kv,
           first[0] ? "; first: " : "", first);
    ck_assert_int_gt(calls, 0);
    ck_assert_msg(diff_out == 0 && diff_cpu == 0 && diff_kv == 0, "2-byte KV cache: %s", first);
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
    tcase_add_test(ops, test_matmul_2byte);
    tcase_add_test(ops, test_matmul_reupload);
    tcase_add_test(ops, test_rope_attention);
    tcase_add_test(ops, test_attention_kv16);
    tcase_add_test(ops, test_attn_params_refused);
    tcase_add_test(ops, test_alibi_clamp_normalize);
    tcase_add_test(ops, test_scale_softcap);
    tcase_add_test(ops, test_moe_ops);
    tcase_add_test(ops, test_moe_grouped_ops);
    tcase_add_test(ops, test_gdn_ops);
    tcase_add_test(ops, test_gdn_mixer_ops);
    tcase_add_test(ops, test_logprobs);
    tcase_add_test(ops, test_fp8w_linear);
    tcase_add_test(ops, test_fp8w_refused);
    model_tests_in_op_twins(ops);
    suite_add_tcase(s, ops);
    TCase *model = tcase_create("model");
    tcase_set_timeout(model, 600);
    model_tests_in_model(model);
    suite_add_tcase(s, model);
    TCase *host = tcase_create("host");
    errors_tests_in_host(host);
#ifdef RC_TEST_EMULATE
    errors_tests_in_model(model);
#endif
    suite_add_tcase(s, host);
    TCase *multi = tcase_create("multi"); /* several devices: fake ones in the host build, real ones on a GPU */
    tcase_set_timeout(multi, 600);
    multi_tests(multi);
    act_tests(multi);
    suite_add_tcase(s, multi);
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
