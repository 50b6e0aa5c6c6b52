/* The CUDA suite's tolerance table and helpers (tests/test_cuda.h). */
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
    {"moe_route", 0, 0, 4, 1},        /* softmax's expf, as act; the experts chosen must agree exactly */
    {"moe_accumulate", 0, 0, 0, 0},   /* + and * only */
    {"moe_shared", 0, 0, 4, 1},       /* the shared expert's sigmoid gate: expf */
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
double tol_for(const char *op, rc_dtype out_dt, bool *unmeasured)
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
double ulp_dt(double x, rc_dtype dt)
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

float *rand_vec(int64_t n, float scale, rc_dtype dt)
{
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    ck_assert(v != NULL);
    for (int64_t i = 0; i < n; i++)
        v[i] = rc_round_to(frand(scale), dt);
    return v;
}

pair make_pair(rc_kernels k)
{
    pair p;
    rc_status s = test_backend_create(k, &p.t);
    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
    ck_assert(rc_backend_cpu_create(0, k, &p.c) == RC_OK);
    return p;
}

void free_pair(pair *p)
{
    rc_backend_destroy(p->t);
    rc_backend_destroy(p->c);
}

/* a buffer on the test backend holding host data */
float *dev_copy(rc_backend *be, const float *host, int64_t n)
{
    float *d;
    ck_assert(be->ops->alloc(be, n, &d) == RC_OK);
    ck_assert_msg(be->ops->upload(be, host, n, RC_F32, d) == RC_OK, "%s", rc_last_error());
    return d;
}

float *host_copy(rc_backend *be, const float *dev, int64_t n)
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

void begin_checks(void)
{
    g_failures = 0;
    g_first_failure[0] = '\0';
}

void end_checks(void)
{
    int n = g_failures;
    g_failures = 0;
    ck_assert_msg(n == 0, "%d comparison(s) over their tolerance; the first: %s", n, g_first_failure);
}

/* max |got - ref| against the op's tolerance; prints the measurement */
void compare(const char *op, const char *what, const float *got, const float *ref, int64_t n, rc_dtype out_dt)
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

const rc_dtype k_dts[3] = {RC_F32, RC_BF16, RC_F16};
const char *dt_name(rc_dtype dt) { return dt == RC_F32 ? "fp32" : dt == RC_BF16 ? "bf16" : "fp16"; }
