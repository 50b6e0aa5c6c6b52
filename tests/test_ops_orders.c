/* test_ops_orders.c: test_ops's kernel orders: the GEMM's documented K order, independently
 * written, the 2-byte weights, the activation table, exp64 and the bf16 pair order (test_ops.c
 * holds the fixtures' helpers and the suite). */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_ops.h"
#include "model.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"
#include "test_ops.h"

/* ---- GEMM order: the documented K order, independently written ---------- */

static uint64_t g_rng = 88172645463325252ull;
static float rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float tree(float *v)
{
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            v[j] += v[j + w];
    return v[0];
}

/* README's GEMM order written from its words, not from ops_inline.h: chunks
 * of C, 16 lanes (k mod 16) from zero with fused multiply-adds; sums: each
 * chunk summed by the pairwise tree (j + 8, j + 4, j + 2, j + 1) and the
 * partial sums added in order; else each chunk added lane by lane into the
 * running lanes (the first chunk is them) and one tree at the end. fma_off:
 * multiply and add as two roundings instead. */
static float doc_dot(const float *a, const float *b, int64_t K, int64_t C, bool sums, bool fma_off)
{
    float run[16], lane[16], total = 0.0f;
    for (int64_t c0 = 0; c0 < K; c0 += C) {
        for (int j = 0; j < 16; j++)
            lane[j] = 0.0f;
        for (int64_t k = c0; k < K && k < c0 + C; k++) {
            volatile float p = a[k] * b[k];
            lane[(k - c0) % 16] = fma_off ? lane[(k - c0) % 16] + p : fmaf(a[k], b[k], lane[(k - c0) % 16]);
        }
        if (sums) {
            float t = tree(lane);
            total = c0 == 0 ? t : total + t;
        } else {
            for (int j = 0; j < 16; j++)
                run[j] = c0 == 0 ? lane[j] : run[j] + lane[j];
        }
    }
    if (K == 0)
        return 0.0f;
    return sums ? total : tree(run);
}

/* chunk length; *sums: split-K (partial sums) or K tiles (lanes) */
static int64_t doc_chunk(bool invariant, int64_t M, int64_t K, bool *sums)
{
    *sums = !invariant && M <= 256;
    if (invariant)
        return K > 0 ? K : 16;
    int64_t slices = M <= 16 ? 4 : 2;
    if (M > 256)
        return 128;
    int64_t c = (K + slices - 1) / slices;
    c = (c + 15) / 16 * 16;
    return c > 0 ? c : 16;
}

/* Every M class of each strategy and K with and without a 16-tail: the CPU
 * matmul (AVX-512 micro-kernels where the CPU has them, threads over blocks)
 * and rco_gemm_dot (the plain-C path and the CUDA twin) are bitwise the
 * documented order, with and without bias, fp32 and rounded outputs. */
START_TEST(test_gemm_order)
{
    static const int64_t Ms[] = {1, 3, 16, 17, 50, 256, 257, 301};
    static const int64_t Ks[] = {1, 15, 16, 33, 130, 257, 576};
    const int64_t N = 70;
    rc_backend *be[2];
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &be[0]) == RC_OK);
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be[1]) == RC_OK);
    int64_t checked = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
            const int64_t M = Ms[mi], K = Ks[ki];
            float *x = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
            float *bias = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * M * N);
            for (int64_t i = 0; i < M * K; i++)
                x[i] = rnd();
            for (int64_t i = 0; i < N * K; i++)
                W[i] = rnd();
            for (int64_t i = 0; i < N; i++)
                bias[i] = rnd();
            for (int k = 0; k < 2; k++) {
                bool sums;
                const int64_t C = doc_chunk(k == 0, M, K, &sums);
                const rc_dtype out = (mi + ki + (size_t)k) % 2 ? RC_BF16 : RC_F32;
                const float *b = (mi + ki) % 3 ? bias : NULL;
                ck_assert(be[k]->ops->matmul(be[k], x, M, K, rc_wt_f32(W), N, b, RC_F32, out, y) == RC_OK);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        float v = doc_dot(x + m * K, W + n * K, K, C, sums, false);
                        float want = rc_round_to(b ? v + b[n] : v, out);
                        /* the written-once order (the portable CPU path, the CUDA invariant GEMM) */
                        if (n % 7 == 0) {
                            float r = rco_gemm_dot(x + m * K, W + n * K, K, 1,
                                                   rco_gemm_order_for(k == 0, M, K));
                            ck_assert_msg(rc_f32_bits(r) == rc_f32_bits(v),
                                          "rco_gemm_dot M=%lld K=%lld: %a, documented order %a", (long long)M,
                                          (long long)K, r, v);
                        }
                        ck_assert_msg(rc_f32_bits(y[m * N + n]) == rc_f32_bits(want),
                                      "%s M=%lld K=%lld: y[%lld,%lld] = %a, documented order %a",
                                      k ? "engine" : "invariant", (long long)M, (long long)K, (long long)m,
                                      (long long)n, y[m * N + n], want);
                        checked++;
                    }
            }
            free(x); free(W); free(bias); free(y);
        }
    printf("gemm order: %lld outputs bitwise the documented order\n", (long long)checked);
    rc_backend_destroy(be[0]);
    rc_backend_destroy(be[1]);
}
END_TEST

/* K past two K blocks of the AVX-512 kernel (a chunk's lanes carried between
 * K blocks): every M class, K on and off the 16 grid and the block grid, fp32
 * weights (rows aligned and not) and bf16 weights (widened to the panel, or
 * read in place for a few rows), bitwise the documented order. */
START_TEST(test_gemm_order_kblocks)
{
    static const int64_t Ms[] = {3, 17, 257, 301};
    static const int64_t Ks[] = {2049, 3072, 3079};
    const int64_t N = 70;
    rc_backend *be[2];
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &be[0]) == RC_OK);
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be[1]) == RC_OK);
    int64_t checked = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
            const int64_t M = Ms[mi], K = Ks[ki];
            float *x = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
            float *Wr = malloc(sizeof(float) * N * K), *y = malloc(sizeof(float) * M * N);
            uint16_t *Wb = malloc(sizeof(uint16_t) * N * K);
            for (int64_t i = 0; i < M * K; i++)
                x[i] = rnd();
            for (int64_t i = 0; i < N * K; i++) {
                W[i] = rnd();
                Wb[i] = rc_f32_to_bf16(W[i]);
                Wr[i] = rc_bf16_to_f32(Wb[i]);
            }
            for (int k = 0; k < 2; k++)
                for (int wb = 0; wb < 2; wb++) {
                    bool sums;
                    const int64_t C = doc_chunk(k == 0, M, K, &sums);
                    const rc_wt wt = wb ? (rc_wt){Wb, RC_BF16, false} : rc_wt_f32(W);
                    const float *Wv = wb ? Wr : W;
                    ck_assert(be[k]->ops->matmul(be[k], x, M, K, wt, N, NULL, RC_F32, RC_F32, y) == RC_OK);
                    for (int64_t m = 0; m < M; m++)
                        for (int64_t n = 0; n < N; n++) {
                            const float want = doc_dot(x + m * K, Wv + n * K, K, C, sums, false);
                            ck_assert_msg(rc_f32_bits(y[m * N + n]) == rc_f32_bits(want),
                                          "%s %s M=%lld K=%lld: y[%lld,%lld] = %a, documented order %a",
                                          k ? "engine" : "invariant", wb ? "bf16" : "fp32", (long long)M,
                                          (long long)K, (long long)m, (long long)n, y[m * N + n], want);
                            checked++;
                        }
                }
            free(x); free(W); free(Wr); free(Wb); free(y);
        }
    printf("gemm order over K blocks: %lld outputs bitwise the documented order\n", (long long)checked);
    rc_backend_destroy(be[0]);
    rc_backend_destroy(be[1]);
}
END_TEST

/* The fused multiply-add changes nothing for bf16 and fp16 operands: their
 * products are exact in fp32 (8 x 8 and 11 x 11 significant bits), so the
 * documented order gives the same bits with the product rounded first. */
START_TEST(test_gemm_fma_neutral)
{
    const int64_t K = 3072, n = 400;
    float *a = malloc(sizeof(float) * K), *b = malloc(sizeof(float) * K);
    for (int dt = 0; dt < 2; dt++) {
        int64_t same = 0;
        for (int64_t t = 0; t < n; t++) {
            for (int64_t i = 0; i < K; i++) {
                a[i] = rc_round_to(rnd() * 4.0f, dt ? RC_F16 : RC_BF16);
                b[i] = rc_round_to(rnd() * 0.05f, dt ? RC_F16 : RC_BF16);
            }
            for (int c = 0; c < 2; c++) {
                int64_t C = c ? 128 : 784;
                same += rc_f32_bits(doc_dot(a, b, K, C, c, false)) == rc_f32_bits(doc_dot(a, b, K, C, c, true));
            }
        }
        ck_assert_msg(same == 2 * n, "%s: %lld of %lld dots differ with and without FMA", dt ? "fp16" : "bf16",
                      (long long)(2 * n - same), (long long)(2 * n));
        /* and for fp32 operands it does change results (the test can tell) */
        int64_t diff = 0;
        for (int64_t t = 0; t < 50; t++) {
            for (int64_t i = 0; i < K; i++) {
                a[i] = rnd();
                b[i] = rnd();
            }
            diff += rc_f32_bits(doc_dot(a, b, K, K, false, false)) != rc_f32_bits(doc_dot(a, b, K, K, false, true));
        }
        ck_assert_msg(diff > 0, "fp32 operands: FMA never changed a dot");
    }
    free(a);
    free(b);
}
END_TEST

/* Weights stored at 2 bytes (bf16 / fp16, as an engine of that dtype holds
 * them) give bitwise the results of the same values stored as fp32: every
 * strategy's GEMM (each M class, K with and without a 16-tail, the masked
 * tail loads), embed and normalize_rows widen them exactly. */
START_TEST(test_weights_2byte)
{
    static const int64_t Ms[] = {1, 5, 16, 17, 300};
    static const int64_t Ks[] = {15, 64, 257};
    const int64_t N = 37;
    static const rc_kernels kk[] = {RC_KERNELS_INVARIANT, RC_KERNELS_ENGINE, RC_KERNELS_BLAS};
    int64_t checked = 0;
    for (int dti = 0; dti < 2; dti++) {
        const rc_dtype dt = dti ? RC_F16 : RC_BF16;
        for (size_t ki = 0; ki < sizeof kk / sizeof *kk; ki++) {
            rc_backend *be;
            ck_assert(rc_backend_cpu_create(0, kk[ki], &be) == RC_OK);
            for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
                for (size_t ji = 0; ji < sizeof Ks / sizeof *Ks; ji++) {
                    const int64_t M = Ms[mi], K = Ks[ji];
                    float *x = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
                    float *b = malloc(sizeof(float) * N), *y32 = malloc(sizeof(float) * M * N);
                    float *y16 = malloc(sizeof(float) * M * N);
                    uint16_t *W16 = malloc(sizeof(uint16_t) * N * K);
                    for (int64_t i = 0; i < M * K; i++)
                        x[i] = rc_round_to(rnd(), dt);
                    for (int64_t i = 0; i < N * K; i++) {
                        W[i] = rc_round_to(rnd() * 0.1f, dt);
                        W16[i] = dt == RC_BF16 ? rc_f32_to_bf16(W[i]) : rc_f32_to_f16(W[i]);
                    }
                    for (int64_t i = 0; i < N; i++)
                        b[i] = rnd();
                    ck_assert(be->ops->matmul(be, x, M, K, rc_wt_f32(W), N, b, dt, dt, y32) == RC_OK);
                    ck_assert(be->ops->matmul(be, x, M, K, (rc_wt){W16, dt, false}, N, b, dt, dt, y16) == RC_OK);
                    ck_assert_msg(memcmp(y32, y16, sizeof(float) * M * N) == 0,
                                  "%s %s weights M=%lld K=%lld: 2-byte storage changes the GEMM",
                                  rc_kernels_name(kk[ki]), rc_dtype_name(dt), (long long)M, (long long)K);
                    checked += M * N;
                    if (mi == 0 && ji == 2) { /* embed and normalize_rows: rows of [N, K] */
                        const int32_t tok[3] = {5, 0, (int32_t)N - 1};
                        float *n32 = malloc(sizeof(float) * N * K), *n16 = malloc(sizeof(float) * N * K);
                        ck_assert(be->ops->embed(be, tok, 3, rc_wt_f32(W), K, n32) == RC_OK);
                        ck_assert(be->ops->embed(be, tok, 3, (rc_wt){W16, dt, false}, K, n16) == RC_OK);
                        ck_assert(memcmp(n32, n16, sizeof(float) * 3 * K) == 0);
                        ck_assert(be->ops->normalize_rows(be, rc_wt_f32(W), N, K, 1e-12f, dt, n32) == RC_OK);
                        ck_assert(be->ops->normalize_rows(be, (rc_wt){W16, dt, false}, N, K, 1e-12f, dt, n16) ==
                                  RC_OK);
                        ck_assert(memcmp(n32, n16, sizeof(float) * N * K) == 0);
                        free(n32);
                        free(n16);
                    }
                    free(x); free(W); free(b); free(y32); free(y16); free(W16);
                }
            rc_backend_destroy(be);
        }
    }
    printf("2-byte weights: %lld GEMM outputs bitwise those of fp32 storage\n", (long long)checked);
}
END_TEST

/* bf16 activations come from a table of rco_act_dt over all 65536 bf16 inputs
 * (backend_cpu.c act_table): through the CPU backend's act and act_mul, every
 * bf16 value (NaNs, infinities, subnormals included) and values that are not
 * bf16 (computed directly) give rco_act_dt's bits, for every activation. */
START_TEST(test_act_table)
{
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be) == RC_OK);
    const int64_t n = 65536 + 1000;
    float *x = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n), *up = malloc(sizeof(float) * n);
    ck_assert(x && g && up);
    static const rc_act acts[] = {RC_ACT_GELU_ERF, RC_ACT_GELU_TANH, RC_ACT_SILU, RC_ACT_GELU_BLOOM, RC_ACT_GELU_NEW};
    int64_t checked = 0;
    for (size_t a = 0; a < sizeof acts / sizeof *acts; a++) {
        for (int64_t i = 0; i < n; i++) {
            x[i] = i < 65536 ? rc_bits_f32((uint32_t)i << 16) : 6.0f * rnd(); /* the tail: not bf16 values */
            up[i] = rc_round_to(rnd(), RC_BF16);
        }
        memcpy(g, x, sizeof(float) * n);
        ck_assert(be->ops->act(be, acts[a], g, n, RC_BF16) == RC_OK);
        for (int64_t i = 0; i < n; i++) {
            const float want = rco_act_dt(acts[a], x[i], RC_BF16);
            ck_assert_msg(rc_f32_bits(g[i]) == rc_f32_bits(want), "act %d x %a: %a, rco_act_dt %a", (int)acts[a],
                          (double)x[i], (double)g[i], (double)want);
        }
        memcpy(g, x, sizeof(float) * n);
        ck_assert(be->ops->act_mul(be, acts[a], g, up, n, RC_BF16, RC_BF16) == RC_OK);
        for (int64_t i = 0; i < n; i++) {
            const float want = rc_round_to(rco_act_dt(acts[a], x[i], RC_BF16) * up[i], RC_BF16);
            ck_assert_msg(rc_f32_bits(g[i]) == rc_f32_bits(want), "act_mul %d x %a: %a, want %a", (int)acts[a],
                          (double)x[i], (double)g[i], (double)want);
        }
        checked += 2 * n;
    }
    printf("bf16 activation table: %lld outputs bitwise rco_act_dt\n", (long long)checked);
    free(x);
    free(g);
    free(up);
    rc_backend_destroy(be);
}
END_TEST

static int64_t ulps64(double a, double b)
{
    int64_t x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    return x > y ? x - y : y - x;
}

/* rco_exp64 (the fp64 exp of the log-softmax's sum and of the sampler, the
 * same bits on the CPU and the GPU) against libm's exp (glibc: within 0.502
 * ulp of the true value) on 4M inputs over its whole range and where the
 * log-softmax uses it (z - max in [-40, 0]): within 1 ulp, the share of
 * exact results printed; the special values; the AVX-512 path
 * (rc_exp64_floats, and the CPU backend's fp32 log-probs) bitwise the
 * scalar function. */
START_TEST(test_exp64)
{
    uint64_t st = 12345;
    int64_t worst = 0, exact = 0;
    const int64_t n = 4000000;
    for (int64_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(st >> 11) * 0x1p-53;
        const double x = i % 2 ? -746.0 + u * (709.7 + 746.0) : -40.0 * u;
        const int64_t d = ulps64(rco_exp64(x), exp(x));
        worst = d > worst ? d : worst;
        exact += d == 0;
    }
    printf("rco_exp64: max %lld ulp from libm's exp over %lld inputs, %.2f%% bitwise equal\n", (long long)worst,
           (long long)n, 100.0 * (double)exact / (double)n);
    ck_assert_int_le(worst, 1);
    ck_assert(rco_exp64(0.0) == 1.0 && rco_exp64(-0.0) == 1.0);
    ck_assert(rco_exp64(-INFINITY) == 0.0 && rco_exp64(-750.0) == 0.0 && rco_exp64(-1e300) == 0.0);
    ck_assert(isinf(rco_exp64(710.5)) && isinf(rco_exp64(INFINITY)) && isnan(rco_exp64(NAN)));
    ck_assert_int_le(ulps64(rco_exp64(-740.0), exp(-740.0)), 1); /* a subnormal result */
    ck_assert_int_le(ulps64(rco_exp64(709.0), exp(709.0)), 1);

    /* the vector path: 8 lanes and the scalar tail, specials in every lane position */
    enum { NF = 100003 };
    float *xf = malloc(NF * sizeof *xf);
    double *ef = malloc(NF * sizeof *ef);
    ck_assert(xf && ef);
    static const float sp[] = {-INFINITY, NAN, -750.0f, -745.1f, -744.0f, -708.5f, 1e-40f, -0.0f, 0.0f, 711.0f,
                               709.7f, INFINITY, -1e-30f, -103.97f, 88.7f};
    for (int64_t i = 0; i < NF; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        xf[i] = i % 17 == 3 ? sp[(i / 17) % (sizeof sp / sizeof *sp)]
                            : (float)(-60.0 + 70.0 * (double)(st >> 11) * 0x1p-53);
    }
    rc_exp64_floats(xf, NF, ef);
    for (int64_t i = 0; i < NF; i++) {
        const double want = rco_exp64((double)xf[i]);
        ck_assert_msg(memcmp(&want, &ef[i], sizeof want) == 0, "rc_exp64_floats x[%lld] = %a: %a, scalar %a",
                      (long long)i, (double)xf[i], ef[i], want);
    }

    /* the CPU backend's fp32 log-probs (its AVX-512 sum) bitwise rco_logprob_row */
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be) == RC_OK);
    static const int64_t Vs[] = {1, 7, 8, 9, 1000, 50257};
    for (size_t vi = 0; vi < sizeof Vs / sizeof *Vs; vi++)
        for (int t = 0; t < 2; t++) {
            const int64_t V = Vs[vi], M = 3;
            const float T = t ? 0.7f : 1.0f;
            float *x = malloc(sizeof(float) * M * V), *full = malloc(sizeof(float) * M * V);
            float tgt[3], want_full, want_tgt = NAN;
            int32_t targets[3];
            ck_assert(x && full);
            for (int64_t i = 0; i < M * V; i++)
                x[i] = i % 11 == 5 ? -INFINITY : 8.0f * rnd();
            x[0] = 3.0f; /* one finite logit per row at least */
            x[V] = 2.0f;
            x[2 * V] = 1.0f;
            for (int r = 0; r < M; r++)
                targets[r] = (int32_t)((r * 7919) % V);
            ck_assert(be->ops->logprobs(be, x, M, V, T, RC_F32, full, targets, tgt) == RC_OK);
            for (int64_t r = 0; r < M; r++) {
                float *row = malloc(sizeof(float) * V);
                ck_assert(row);
                rco_logprob_row(x + r * V, V, T, RC_F32, row, targets[r], &want_tgt);
                ck_assert_msg(rc_f32_bits(tgt[r]) == rc_f32_bits(want_tgt), "V=%lld T=%g row %lld: %a vs %a",
                              (long long)V, (double)T, (long long)r, tgt[r], want_tgt);
                for (int64_t i = 0; i < V; i++) {
                    want_full = row[i];
                    ck_assert_msg(rc_f32_bits(full[r * V + i]) == rc_f32_bits(want_full),
                                  "V=%lld T=%g lp[%lld,%lld] %a vs %a", (long long)V, (double)T, (long long)r,
                                  (long long)i, full[r * V + i], want_full);
                }
                free(row);
            }
            free(x);
            free(full);
        }
    rc_backend_destroy(be);
    free(xf);
    free(ef);
}
END_TEST

/* ---- the bf16 pair order (engine GEMMs with bf16 operands) ---------------- */

/* docs/numerics.md's words: a denormal becomes a zero of its sign */
static float doc_flush(float v)
{
    return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}

/* one lane over the pair (e, o = e + 1): odd element first, each step an fma
 * of the flushed operands into the flushed lane, the result flushed */
static float doc_pair(float lane, float ae, float be, float ao, float bo)
{
    lane = doc_flush(fmaf(doc_flush(ao), doc_flush(bo), doc_flush(lane)));
    return doc_flush(fmaf(doc_flush(ae), doc_flush(be), lane));
}

/* The pair order from docs/numerics.md (operands already bf16 values): chunks
 * of C (a multiple of 32), each padded with zeros to a multiple of 32; lane
 * j takes elements 2j + 1 then 2j of every block of 32; the chunks merge as
 * doc_dot's; a NaN is returned as 0x7fc00000. */
static float doc_pairs_dot(const float *a, const float *b, int64_t K, int64_t C, bool sums)
{
    float run[16], lane[16], total = 0.0f;
    for (int64_t c0 = 0; c0 < K; c0 += C) {
        const int64_t c1 = c0 + C < K ? c0 + C : K;
        for (int j = 0; j < 16; j++)
            lane[j] = 0.0f;
        for (int64_t blk = c0; blk < c1; blk += 32)
            for (int j = 0; j < 16; j++) {
                const int64_t e = blk + 2 * j, o = e + 1;
                lane[j] = doc_pair(lane[j], e < c1 ? a[e] : 0.0f, e < c1 ? b[e] : 0.0f, o < c1 ? a[o] : 0.0f,
                                   o < c1 ? b[o] : 0.0f);
            }
        if (sums) {
            float t = tree(lane);
            total = c0 == 0 ? t : total + t;
        } else {
            for (int j = 0; j < 16; j++)
                run[j] = c0 == 0 ? lane[j] : run[j] + lane[j];
        }
    }
    const float v = K == 0 ? 0.0f : sums ? total : tree(run);
    return v != v ? rc_bits_f32(0x7fc00000u) : v;
}

/* the engine's pair-order chunk: M <= 16 ceil(K / 4), M <= 256 ceil(K / 2),
 * each rounded up to 32 (partial sums); larger M tiles of 128 (lanes) */
static int64_t doc_pairs_chunk(int64_t M, int64_t K, bool *sums)
{
    *sums = M <= 256;
    if (M > 256)
        return 128;
    const int64_t slices = M <= 16 ? 4 : 2;
    const int64_t c = ((K + slices - 1) / slices + 31) / 32 * 32;
    return c > 0 ? c : 32;
}

/* a bf16 value: mostly rnd() (times 4 in x), and where `specials` a share of
 * denormals, values whose products fall near fp32's smallest normal,
 * infinities and NaNs */
static float pairs_val(bool specials, float scale)
{
    const float v = rnd();
    if (specials) {
        const uint64_t r = g_rng >> 40;
        switch (r % 29) {
        case 0: return rc_bf16_to_f32((uint16_t)(((r >> 8) & 0x7fu) | ((r >> 16) & 1u) << 15)); /* denormal */
        case 1:
        case 2: return rc_round_bf16(ldexpf(v, -63)); /* products near 2^-126 */
        case 3: return (r >> 8) & 1u ? INFINITY : -INFINITY;
        case 4: return ((r >> 8) % 7u) ? rc_round_bf16(ldexpf(v, -60)) : NAN;
        default: break;
        }
    }
    return rc_round_bf16(v * scale);
}

/* Engine GEMMs with bf16 operands are bitwise docs/numerics.md's pair order,
 * written out above, on the path this process takes (vdpbf16ps, its FMA
 * emulation, or the plain-C twin: the meson tests ops_pair_order_* force
 * each), for every M class, K = 1, odd, with and without a 32-tail, bf16 and
 * fp32 storage of the weights, K-slices, bias, fp32 and bf16 outputs, with
 * denormals, infinities and NaNs; and rco_gemm_dot (the plain-C twin, the
 * CUDA host build's) agrees. */
START_TEST(test_gemm_pair_order)
{
    static const int64_t Ms[] = {1, 5, 16, 17, 256, 257, 301};
    static const int64_t Ks[] = {1, 2, 15, 31, 32, 33, 77, 130, 257, 576};
    const int64_t N = 70;
    const char *path = rc_cpu_gemm_pairs_path();
    const char *no_bf16 = getenv("RC_NO_AVX512BF16"), *portable = getenv("RC_GEMM_PORTABLE");
    uint16_t probe_a[32] = {0}, probe_b[32] = {0};
    float probe_acc[16] = {0};
    const bool have = rc_cpu_dpbf16_raw(probe_a, probe_b, probe_acc);
    printf("gemm pair order: path %s (CPU %s vdpbf16ps); kernels at M = 1, 64, 1024: %s; %s; %s\n", path,
           have ? "has" : "lacks", rc_cpu_gemm_pairs_kernel(1), rc_cpu_gemm_pairs_kernel(64),
           rc_cpu_gemm_pairs_kernel(1024));
    if (portable)
        ck_assert_str_eq(path, "plain C");
    else if (no_bf16 || !have)
        ck_assert_str_ne(path, "vdpbf16ps");
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be) == RC_OK);
    int64_t checked = 0, nonfinite = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
            const int64_t M = Ms[mi], K = Ks[ki];
            const bool specials = (mi + ki) % 3 == 1;
            float *x = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
            uint16_t *Wb = malloc(sizeof(uint16_t) * N * K);
            float *bias = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * M * N);
            for (int64_t i = 0; i < M * K; i++)
                x[i] = pairs_val(specials, 4.0f);
            for (int64_t i = 0; i < N * K; i++) {
                W[i] = pairs_val(specials, 1.0f);
                Wb[i] = rc_f32_to_bf16(W[i]);
            }
            for (int64_t i = 0; i < N; i++)
                bias[i] = rc_round_bf16(rnd());
            bool sums;
            const int64_t C = doc_pairs_chunk(M, K, &sums);
            for (int st = 0; st < 2; st++) {
                const rc_wt wt = st ? (rc_wt){Wb, RC_BF16, false} : rc_wt_f32(W);
                const rc_dtype out = (mi + ki + (size_t)st) % 2 ? RC_BF16 : RC_F32;
                const float *b = (mi + ki + (size_t)st) % 3 ? bias : NULL;
                ck_assert(be->ops->matmul(be, x, M, K, wt, N, b, RC_BF16, out, y) == RC_OK);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        const float v = doc_pairs_dot(x + m * K, W + n * K, K, C, sums);
                        const float want = rc_round_to(b ? v + b[n] : v, out);
                        if (n % 7 == 0 && st == 0) {
                            const float r = rco_gemm_dot(x + m * K, W + n * K, K, 1,
                                                         rco_gemm_order_dt(0, M, K, RC_BF16));
                            ck_assert_msg(rc_f32_bits(r) == rc_f32_bits(v),
                                          "rco_gemm_dot pairs M=%lld K=%lld: %a, documented order %a",
                                          (long long)M, (long long)K, r, v);
                        }
                        ck_assert_msg(rc_f32_bits(y[m * N + n]) == rc_f32_bits(want),
                                      "pairs (%s) M=%lld K=%lld W %s: y[%lld,%lld] = %a, documented order %a", path,
                                      (long long)M, (long long)K, st ? "bf16" : "fp32", (long long)m, (long long)n,
                                      y[m * N + n], want);
                        nonfinite += !isfinite(want);
                        checked++;
                    }
            }
            /* a K-slice, read in place: the order of a GEMM of depth Ks */
            if (K >= 3) {
                const int64_t k0 = K / 3, Kq = K - k0 - K / 5;
                bool ssum;
                const int64_t Cs = doc_pairs_chunk(M, Kq, &ssum);
                ck_assert(be->ops->matmul_kslice(be, x, M, K, k0, Kq, (rc_wt){Wb, RC_BF16, false}, N, NULL, RC_BF16,
                                                 RC_F32, y) == RC_OK);
                float *xs = malloc(sizeof(float) * Kq), *ws = malloc(sizeof(float) * Kq);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        memcpy(xs, x + m * K + k0, sizeof(float) * Kq);
                        memcpy(ws, W + n * K + k0, sizeof(float) * Kq);
                        const float want = doc_pairs_dot(xs, ws, Kq, Cs, ssum);
                        ck_assert_msg(rc_f32_bits(y[m * N + n]) == rc_f32_bits(want),
                                      "pairs (%s) M=%lld K=%lld slice [%lld, +%lld): y[%lld,%lld] = %a, documented %a",
                                      path, (long long)M, (long long)K, (long long)k0, (long long)Kq, (long long)m,
                                      (long long)n, y[m * N + n], want);
                        checked++;
                    }
                free(xs);
                free(ws);
            }
            free(x); free(W); free(Wb); free(bias); free(y);
        }
    printf("gemm pair order (%s): %lld outputs bitwise the documented order (%lld not finite)\n", path,
           (long long)checked, (long long)nonfinite);
    ck_assert(nonfinite > 0 && nonfinite < checked / 2);
    rc_backend_destroy(be);
}
END_TEST

/* The instruction itself against the twin's arithmetic (rco_dpbf16_pair),
 * one lane at a time, on 4,000,000 lanes: bf16 operands with exponents over
 * the whole range (half the draws) or near 1, 3% zeros and denormals, 1%
 * infinities and NaNs; accumulators over fp32's whole range (denormals,
 * infinities and NaNs included), a quarter of them minus the first product
 * (cancellation). Bitwise, except that two NaNs compare equal (payloads are
 * not part of the order: the GEMM returns one quiet NaN). Without the
 * instruction there is nothing to compare, and it says so. */
static uint64_t g_dp = 0x9e3779b97f4a7c15ull;
static uint64_t dp_next(void)
{
    g_dp ^= g_dp << 13;
    g_dp ^= g_dp >> 7;
    g_dp ^= g_dp << 17;
    return g_dp;
}

static uint16_t dp_bf16(bool wide)
{
    const uint64_t r = dp_next();
    const unsigned c = (unsigned)(r % 100);
    const uint32_t e = c < 3 ? 0u : c < 4 ? 255u : wide ? (uint32_t)((r >> 8) % 256) : 110u + (uint32_t)((r >> 8) % 40);
    return (uint16_t)((((r >> 20) & 1u) << 15) | (e << 7) | ((r >> 24) & 127u));
}

static float dp_acc(void)
{
    const uint64_t r = dp_next();
    const unsigned c = (unsigned)(r % 100);
    if (c < 2)
        return 0.0f;
    const uint32_t e = c < 10 ? 0u : c < 11 ? 255u : (uint32_t)((r >> 8) % 256);
    return rc_bits_f32((uint32_t)(((r >> 20) & 1u) << 31 | e << 23 | ((r >> 30) & 0x7fffffu)));
}

START_TEST(test_dpbf16_twin)
{
    uint16_t a[32] = {0}, b[32] = {0};
    float acc[16], hw[16] = {0};
    if (!rc_cpu_dpbf16_raw(a, b, hw)) {
        printf("dpbf16 twin: this CPU has no vdpbf16ps; the GEMM takes path %s\n", rc_cpu_gemm_pairs_path());
        ck_assert_str_ne(rc_cpu_gemm_pairs_path(), "vdpbf16ps");
        return;
    }
    int64_t lanes = 0, nan = 0, differ = 0, flushed = 0, even_first = 0;
    for (int64_t it = 0; it < 250000; it++) {
        const bool wide = it & 1;
        for (int i = 0; i < 32; i++) {
            a[i] = dp_bf16(wide);
            b[i] = dp_bf16(wide);
        }
        for (int j = 0; j < 16; j++) {
            acc[j] = dp_acc();
            if ((it & 3) == 2 && (dp_next() & 1))
                acc[j] = -(rc_bf16_to_f32(a[2 * j + 1]) * rc_bf16_to_f32(b[2 * j + 1]));
            hw[j] = acc[j];
        }
        ck_assert(rc_cpu_dpbf16_raw(a, b, hw));
        for (int j = 0; j < 16; j++) {
            const float t = rco_dpbf16_pair(acc[j], rc_bf16_to_f32(a[2 * j]), rc_bf16_to_f32(b[2 * j]),
                                            rc_bf16_to_f32(a[2 * j + 1]), rc_bf16_to_f32(b[2 * j + 1]));
            const float plain = fmaf(rc_bf16_to_f32(a[2 * j]), rc_bf16_to_f32(b[2 * j]),
                                     fmaf(rc_bf16_to_f32(a[2 * j + 1]), rc_bf16_to_f32(b[2 * j + 1]), acc[j]));
            const float swapped = rco_dpbf16_pair(acc[j], rc_bf16_to_f32(a[2 * j + 1]), rc_bf16_to_f32(b[2 * j + 1]),
                                                  rc_bf16_to_f32(a[2 * j]), rc_bf16_to_f32(b[2 * j]));
            lanes++;
            if (t == t && hw[j] == hw[j])
                even_first += rc_f32_bits(swapped) != rc_f32_bits(hw[j]);
            if (t != t || hw[j] != hw[j]) {
                nan++;
                differ += !(t != t && hw[j] != hw[j]);
            } else {
                differ += rc_f32_bits(t) != rc_f32_bits(hw[j]);
                flushed += rc_f32_bits(plain) != rc_f32_bits(t);
            }
            if (differ == 1 && rc_f32_bits(t) != rc_f32_bits(hw[j]))
                ck_abort_msg("vdpbf16ps %a vs twin %a (acc %a, odd %a * %a, even %a * %a)", hw[j], t, acc[j],
                             rc_bf16_to_f32(a[2 * j + 1]), rc_bf16_to_f32(b[2 * j + 1]), rc_bf16_to_f32(a[2 * j]),
                             rc_bf16_to_f32(b[2 * j]));
        }
    }
    printf("dpbf16 twin: %lld lanes, %lld differ (%lld NaN, %lld where flushing changed the plain fma result; "
           "the even element first would differ on %lld)\n",
           (long long)lanes, (long long)differ, (long long)nan, (long long)flushed, (long long)even_first);
    ck_assert_int_eq(differ, 0);
    ck_assert(flushed > 1000 && nan > 1000 && even_first > 1000); /* the draws tell these apart */
}
END_TEST

void orders_tests_in_kernel_orders(TCase *tc)
{
    tcase_add_test(tc, test_gemm_order);
    tcase_add_test(tc, test_gemm_order_kblocks);
    tcase_add_test(tc, test_gemm_fma_neutral);
    tcase_add_test(tc, test_weights_2byte);
    tcase_add_test(tc, test_exp64);
    tcase_add_test(tc, test_act_table);
}

void orders_tests_in_pair_order(TCase *tc)
{
    tcase_add_test(tc, test_gemm_pair_order);
    tcase_add_test(tc, test_dpbf16_twin);
}
