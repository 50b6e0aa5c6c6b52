/* fp8 e4m3 weights (--sampler weights=fp8) against PyTorch on the same inputs.
 *
 * data/fixtures/fp8w/fp8w.safetensors (tools/fixtures/make_fp8w_fixtures.py) holds bf16
 * / fp16 linear layers and torch's quantization and outputs for each weight
 * scale (tensor, channel, 128 x 128 blocks) and activation mode (dynamic per
 * token, per tensor, 1 x 128 groups, none = W8A16). The e4m3 conversion, the
 * fp8 values and every scale must be bitwise equal; the outputs within 1 ulp
 * of the dtype (the fp32 sum of the exact fp8 products is ordered by torch's
 * CPU matmul there and by the kernel strategy here). The number of outputs
 * that differ is printed for the record. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "fp8w.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"

static rc_safetensors *g_st;

static void open_file(void)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/fp8w/fp8w.safetensors");
    ck_assert_msg(rc_st_open_file(p, &g_st) == RC_OK, "%s", rc_last_error());
}

static float *get(const char *name, int64_t *n) { return rc_test_st_f32(g_st, name, n); }

/* distance in values of dt (bf16 / fp16 bits, or fp32 bits) */
static int64_t ulp_dist(float a, float b, rc_dtype dt)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0 : INT32_MAX;
    if (a == b)
        return 0;
    int64_t ia, ib;
    if (dt == RC_F32) {
        ia = (int32_t)rc_f32_bits(a);
        ib = (int32_t)rc_f32_bits(b);
        ia = ia < 0 ? INT32_MIN - ia : ia;
        ib = ib < 0 ? INT32_MIN - ib : ib;
    } else {
        ia = dt == RC_BF16 ? rc_f32_to_bf16(a) : rc_f32_to_f16(a);
        ib = dt == RC_BF16 ? rc_f32_to_bf16(b) : rc_f32_to_f16(b);
        ia = (ia & 0x8000) ? -(ia & 0x7fff) : ia;
        ib = (ib & 0x8000) ? -(ib & 0x7fff) : ib;
    }
    return llabs((long long)(ia - ib));
}

/* max ulp over n values; *n_diff: how many differ bitwise */
static int64_t compare(const float *got, const float *want, int64_t n, rc_dtype dt, int64_t *n_diff)
{
    int64_t m = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t u = ulp_dist(got[i], want[i], dt);
        d += rc_f32_bits(got[i]) != rc_f32_bits(want[i]) && !(isnan(got[i]) && isnan(want[i]));
        m = u > m ? u : m;
    }
    *n_diff = d;
    return m;
}

static void bitwise(const char *what, const float *got, const float *want, int64_t n)
{
    int64_t nd, u = compare(got, want, n, RC_F32, &nd);
    ck_assert_msg(nd == 0, "%s: %lld of %lld differ (max %lld fp32 ulp)", what, (long long)nd, (long long)n,
                  (long long)u);
}

/* every finite e4m3 value, the midpoints between neighbours and values off
 * them, beyond 448, subnormals: torch's clamp + .to(float8_e4m3fn) */
START_TEST(test_e4m3_round)
{
    open_file();
    int64_t n, n2;
    float *in = get("e4m3.in", &n), *want = get("e4m3.out", &n2);
    float *got = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        got[i] = rco_fp8_e4m3_round(in[i]);
    bitwise("e4m3 conversion", got, want, n);
    printf("e4m3 conversion: %lld values bitwise equal to torch's\n", (long long)n);
    ck_assert(isnan(rco_fp8_e4m3_round(NAN)));
    ck_assert(rco_fp8_e4m3_round(INFINITY) == 448.0f && rco_fp8_e4m3_round(-1e30f) == -448.0f);
    ck_assert(signbit(rco_fp8_e4m3_round(-0.0f)) && signbit(rco_fp8_e4m3_round(-1e-6f)));
    free(in);
    free(want);
    free(got);
    rc_st_close(g_st);
}
END_TEST

static const struct {
    const char *name;
    rc_dtype dt;
} k_dts[] = {{"bf16", RC_BF16}, {"f16", RC_F16}};
static const struct {
    const char *name;
    int64_t M, K, N;
} k_shapes[] = {{"k256", 5, 256, 96}, {"k200", 4, 200, 72}, {"n136", 6, 256, 136}};
static const char *const k_scales[] = {"tensor", "channel", "block"};
static const char *const k_acts[] = {"token", "tensor", "none"};

/* the weights' and activations' fp8 values and scales, bitwise */
START_TEST(test_quantize)
{
    open_file();
    char key[128];
    int checked = 0;
    for (size_t di = 0; di < 2; di++)
        for (size_t si = 0; si < 3; si++) {
            const int64_t M = k_shapes[si].M, K = k_shapes[si].K, N = k_shapes[si].N;
            const char *p = k_shapes[si].name, *d = k_dts[di].name;
            int64_t n;
            snprintf(key, sizeof key, "%s.%s.w", d, p);
            float *w = get(key, &n);
            snprintf(key, sizeof key, "%s.%s.x", d, p);
            float *x = get(key, &n);
            float *q = malloc(sizeof(float) * (size_t)(N * K + M * K)), *s = malloc(sizeof(float) * (size_t)(N * K));
            for (int sc = 0; sc < 3; sc++) {
                if (sc == RC_WSCALE_BLOCK && K % RC_FP8_BLOCK)
                    continue;
                rc_fp8w_quant_weight(w, N, K, (rc_wscale)sc, NULL, q, s);
                int64_t nq, ns;
                snprintf(key, sizeof key, "%s.%s.w.%s.q", d, p, k_scales[sc]);
                float *wq = get(key, &nq);
                snprintf(key, sizeof key, "%s.%s.w.%s.s", d, p, k_scales[sc]);
                float *ws = get(key, &ns);
                ck_assert_int_eq(nq, N * K);
                bitwise(key, q, wq, nq);
                bitwise(key, s, ws, ns);
                free(wq);
                free(ws);
                checked++;
            }
            static const char *const act_keys[] = {"token", "tensor", "group"};
            for (int a = 0; a < 3; a++) {
                if (a == 2 && K % RC_FP8_BLOCK)
                    continue;
                rc_fp8w_quant_act(x, M, K, a == 2 ? RC_ACTQ_TOKEN : (rc_actquant)a, a == 2, q, s);
                int64_t nq, ns;
                snprintf(key, sizeof key, "%s.%s.x.%s.q", d, p, act_keys[a]);
                float *xq = get(key, &nq);
                snprintf(key, sizeof key, "%s.%s.x.%s.s", d, p, act_keys[a]);
                float *xs = get(key, &ns);
                bitwise(key, q, xq, nq);
                bitwise(key, s, xs, ns);
                free(xq);
                free(xs);
                checked++;
            }
            free(w);
            free(x);
            free(q);
            free(s);
        }
    printf("fp8 quantization: %d weight / activation cases bitwise equal to torch's\n", checked);
    rc_st_close(g_st);
}
END_TEST

/* the whole linear, with and without bias, under each kernel strategy */
START_TEST(test_linear)
{
    open_file();
    rc_backend *be[3];
    const rc_kernels ks[3] = {RC_KERNELS_INVARIANT, RC_KERNELS_ENGINE, RC_KERNELS_BLAS};
    for (int i = 0; i < 3; i++)
        ck_assert(rc_backend_cpu_create(0, ks[i], &be[i]) == RC_OK);
    char key[128];
    for (size_t di = 0; di < 2; di++)
        for (size_t si = 0; si < 3; si++) {
            const int64_t M = k_shapes[si].M, K = k_shapes[si].K, N = k_shapes[si].N;
            const char *p = k_shapes[si].name, *d = k_dts[di].name;
            const rc_dtype dt = k_dts[di].dt;
            int64_t n;
            snprintf(key, sizeof key, "%s.%s.w", d, p);
            float *w = get(key, &n);
            snprintf(key, sizeof key, "%s.%s.x", d, p);
            float *x = get(key, &n);
            snprintf(key, sizeof key, "%s.%s.b", d, p);
            float *b = get(key, &n);
            float *y = malloc(sizeof(float) * (size_t)(M * N));
            for (int sc = 0; sc < 3; sc++)
                for (int a = 0; a < 3; a++) {
                    if ((sc == RC_WSCALE_BLOCK && K % RC_FP8_BLOCK) || (sc == RC_WSCALE_BLOCK && a == RC_ACTQ_TENSOR))
                        continue;
                    const rc_wq_numerics wq = {RC_WQ_FP8, (rc_wscale)sc, (rc_actquant)a};
                    for (int nb = 0; nb < 2; nb++) {
                        snprintf(key, sizeof key, "%s.%s.%s.%s.%s", d, p, k_scales[sc], k_acts[a],
                                 nb ? "out_nobias" : "out");
                        int64_t no;
                        float *want = get(key, &no);
                        ck_assert_int_eq(no, M * N);
                        for (int k = 0; k < 3; k++) {
                            ck_assert_msg(rc_fp8w_linear_once(be[k], x, M, K, w, N, nb ? NULL : b, &wq, dt, y) == RC_OK,
                                          "%s", rc_last_error());
                            int64_t nd, u = compare(y, want, no, dt, &nd);
                            printf("%-36s %-9s max %lld ulp, %lld of %lld differ bitwise\n", key,
                                   rc_kernels_name(ks[k]), (long long)u, (long long)nd, (long long)no);
                            ck_assert_msg(u <= 1, "%s (%s): max %lld ulp", key, rc_kernels_name(ks[k]), (long long)u);
                        }
                        free(want);
                    }
                }
            free(w);
            free(x);
            free(b);
            free(y);
        }
    for (int i = 0; i < 3; i++)
        rc_backend_destroy(be[i]);
    rc_st_close(g_st);
}
END_TEST

/* what an engine refuses: fp32, autocast, block weights with per-tensor
 * activations (usage), a GPU, block weights on a model whose sizes are not
 * multiples of 128 (unsupported) */
START_TEST(test_supported)
{
    rc_config c = {0};
    c.hidden = 256;
    c.n_heads = 4;
    c.n_kv_heads = 4;
    c.head_dim = 64;
    c.intermediate = 1024;
    rc_numerics n = {.dt = RC_BF16, .logprob_dt = RC_F32, .temperature = 1.0f,
                     .wq = {RC_WQ_FP8, RC_WSCALE_BLOCK, RC_ACTQ_TOKEN}};
    ck_assert(rc_fp8w_supported(&c, &n) == RC_OK);
    c.intermediate = 1000;
    ck_assert(rc_fp8w_supported(&c, &n) == RC_ERR_UNSUPPORTED);
    ck_assert(rc_fp8w_supported(NULL, &n) == RC_OK);
    n.wq.scale = RC_WSCALE_TENSOR;
    ck_assert(rc_fp8w_supported(&c, &n) == RC_OK); /* per tensor: any size */
    n.dt = RC_F32;
    ck_assert(rc_fp8w_supported(&c, &n) == RC_ERR_USAGE);
    n.dt = RC_BF16;
    n.mode = RC_PREC_AUTOCAST;
    ck_assert(rc_fp8w_supported(&c, &n) == RC_ERR_USAGE);
    n.mode = RC_PREC_PURE;
    n.wq = (rc_wq_numerics){RC_WQ_FP8, RC_WSCALE_BLOCK, RC_ACTQ_TENSOR};
    ck_assert(rc_fp8w_supported(NULL, &n) == RC_ERR_USAGE);
    n.wq.kind = RC_WQ_NONE;
    ck_assert(rc_fp8w_supported(&c, &n) == RC_OK); /* no fp8: nothing to check */
}
END_TEST

int main(void)
{
    if (rc_test_no_blas("test_fp8w (its linear compares the three CPU strategies, blas among them)"))
        return RC_TEST_SKIP;
    Suite *s = suite_create("fp8w");
    TCase *tc = tcase_create("fp8w");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_e4m3_round);
    tcase_add_test(tc, test_quantize);
    tcase_add_test(tc, test_linear);
    tcase_add_test(tc, test_supported);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
