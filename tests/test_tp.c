/* Tensor parallelism (README "Numerics", docs/research/tp-allreduce.md)
 * against PyTorch on the same inputs.
 *
 * data/fixtures/tp/tp_{bf16,f16}.safetensors (tools/fixtures/make_tp_fixtures.py)
 * hold random x [M, K], W [N, K], b [N], and for each TP degree k torch's
 * partials x[:, sl] @ W[:, sl].T and its all-reduce of them in each mode
 * (fp32, ring, chain, seq), for the sampler's bias placement (rank 0's
 * partial) and the trainer's (after the reduce). The K-slice GEMMs are GEMMs:
 * within 1 ulp of torch's, as every GEMM in tests/test_ops.c (torch blocks
 * its sums its own way). The reduce is a fixed sequence of dtype adds: given
 * torch's partials it must give torch's bits, every mode, both sides, in
 * one call or in row chunks. End to end (ratiocheck's own partials) the
 * result equals torch's wherever the partials do. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"

static const char *const k_files[] = {"tp_bf16.safetensors", "tp_f16.safetensors"};
static const rc_dtype k_dts[] = {RC_BF16, RC_F16};
static const char *const k_modes[] = {"fp32", "ring", "chain", "seq"};
static const rc_tp_reduce k_mode_ids[] = {RC_TP_REDUCE_FP32, RC_TP_REDUCE_RING, RC_TP_REDUCE_CHAIN,
                                          RC_TP_REDUCE_SEQ};

static rc_safetensors *g_st;
static rc_dtype g_dt;
static const char *g_dtname;
static rc_backend *g_be[3]; /* invariant, engine, blas */
static const char *const k_be_names[] = {"invariant", "engine", "blas"};

static void open_file(int i)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/tp/%s", k_files[i]);
    ck_assert_msg(rc_st_open_file(p, &g_st) == RC_OK, "%s", rc_last_error());
    g_dt = k_dts[i];
    g_dtname = i == 0 ? "bf16" : "fp16";
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &g_be[0]) == RC_OK);
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &g_be[1]) == RC_OK);
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_BLAS, &g_be[2]) == RC_OK);
}

static void close_file(void)
{
    rc_st_close(g_st);
    for (int i = 0; i < 3; i++)
        rc_backend_destroy(g_be[i]);
}

static bool has(const char *name) { return rc_st_find(g_st, name) != NULL; }

/* a tensor of any float dtype as float32 (exact); its shape in shape[] */
static float *get(const char *name, int64_t shape[4], int *ndim)
{
    const rc_st_tensor *t = rc_st_find(g_st, name);
    ck_assert_msg(t != NULL, "%s missing", name);
    int64_t n;
    rc_numel(t->shape, t->ndim, &n);
    float *v = malloc(sizeof(float) * (size_t)(n + 1));
    ck_assert_msg(rc_st_read_f32(g_st, name, t->ndim, t->shape, v) == RC_OK, "%s", rc_last_error());
    for (int i = 0; i < t->ndim && shape; i++)
        shape[i] = t->shape[i];
    if (ndim)
        *ndim = t->ndim;
    return v;
}

static int64_t ulp_dist(float a, float b)
{
    if (rc_f32_bits(a) == rc_f32_bits(b))
        return 0;
    int32_t ia = g_dt == RC_BF16 ? rc_f32_to_bf16(a) : rc_f32_to_f16(a);
    int32_t ib = g_dt == RC_BF16 ? rc_f32_to_bf16(b) : rc_f32_to_f16(b);
    ia = (ia & 0x8000) ? -(ia & 0x7fff) : ia;
    ib = (ib & 0x8000) ? -(ib & 0x7fff) : ib;
    return llabs((long long)ia - ib);
}

/* max ulp over n values; *n_diff: how many differ bitwise */
static int64_t max_ulp(const float *got, const float *want, int64_t n, int64_t *n_diff)
{
    int64_t m = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t u = ulp_dist(got[i], want[i]);
        d += u != 0;
        m = u > m ? u : m;
    }
    *n_diff = d;
    return m;
}

static rc_numerics tp_num(int k, rc_tp_reduce mode, bool trainer)
{
    rc_numerics num = rc_numerics_fp32();
    num.dt = g_dt;
    num.tp = k;
    num.tp_reduce = mode;
    num.tp_trainer = trainer;
    return num;
}

typedef struct {
    float *x, *w, *b;
    int64_t M, K, N;
} shape_in;

static shape_in get_shape(int si)
{
    char n[64];
    int64_t sx[4], sw[4];
    shape_in s;
    snprintf(n, sizeof n, "s%d.x", si);
    s.x = get(n, sx, NULL);
    snprintf(n, sizeof n, "s%d.w", si);
    s.w = get(n, sw, NULL);
    snprintf(n, sizeof n, "s%d.b", si);
    s.b = get(n, NULL, NULL);
    s.M = sx[0], s.K = sx[1], s.N = sw[0];
    return s;
}

static void free_shape(shape_in *s) { free(s->x), free(s->w), free(s->b); }

/* Each rank's K-slice GEMM against torch's partial (within 1 ulp, the GEMM
 * policy), and against ratiocheck's own matmul over the slice's columns
 * packed into new arrays (bitwise: the slice is read in place with the same
 * order), with the weights stored at 2 bytes too (the panel path). */
START_TEST(test_partials)
{
    open_file(_i);
    int64_t worst = 0, n_diff_all = 0, n_all = 0;
    for (int si = 0; si < 2; si++) {
        shape_in s = get_shape(si);
        const int64_t M = s.M, K = s.K, N = s.N;
        uint16_t *w16 = malloc(sizeof(uint16_t) * (size_t)(N * K));
        for (int64_t i = 0; i < N * K; i++)
            w16[i] = g_dt == RC_BF16 ? rc_f32_to_bf16(s.w[i]) : rc_f32_to_f16(s.w[i]);
        for (int k = 2; k <= 8; k++) {
            char n[64];
            snprintf(n, sizeof n, "s%d.tp%d.P", si, k);
            if (!has(n))
                continue;
            float *P = get(n, NULL, NULL);
            snprintf(n, sizeof n, "s%d.tp%d.P0b", si, k);
            float *P0b = get(n, NULL, NULL);
            const int64_t Ks = K / k;
            float *got = malloc(sizeof(float) * (size_t)(M * N)), *ref = malloc(sizeof(float) * (size_t)(M * N));
            float *xs = malloc(sizeof(float) * (size_t)(M * Ks)), *ws = malloc(sizeof(float) * (size_t)(N * Ks));
            for (int bi = 0; bi < 3; bi++) {
                rc_backend *be = g_be[bi];
                for (int r = 0; r < k; r++)
                    for (int bias = 0; bias < (r == 0 ? 2 : 1); bias++) {
                        const float *bv = bias ? s.b : NULL, *want = bias ? P0b : P + r * M * N;
                        ck_assert(be->ops->matmul_kslice(be, s.x, M, K, r * Ks, Ks, rc_wt_f32(s.w), N, bv, g_dt, g_dt,
                                                         got) == RC_OK);
                        int64_t nd, u = max_ulp(got, want, M * N, &nd);
                        ck_assert_msg(u <= 1, "%s s%d tp%d rank %d %s%s: max %lld ulp from torch", g_dtname, si, k, r,
                                      k_be_names[bi], bias ? " +bias" : "", (long long)u);
                        worst = u > worst ? u : worst;
                        n_diff_all += nd;
                        n_all += M * N;
                        /* the same columns packed: matmul gives the same bits */
                        for (int64_t m = 0; m < M; m++)
                            memcpy(xs + m * Ks, s.x + m * K + r * Ks, sizeof(float) * (size_t)Ks);
                        for (int64_t j = 0; j < N; j++)
                            memcpy(ws + j * Ks, s.w + j * K + r * Ks, sizeof(float) * (size_t)Ks);
                        ck_assert(be->ops->matmul(be, xs, M, Ks, rc_wt_f32(ws), N, bv, g_dt, g_dt, ref) == RC_OK);
                        ck_assert_msg(max_ulp(got, ref, M * N, &nd) == 0 && nd == 0,
                                      "%s s%d tp%d rank %d %s: the K-slice is not matmul over its columns", g_dtname,
                                      si, k, r, k_be_names[bi]);
                        ck_assert(be->ops->matmul_kslice(be, s.x, M, K, r * Ks, Ks, (rc_wt){w16, g_dt, false}, N, bv,
                                                         g_dt, g_dt, ref) == RC_OK);
                        ck_assert_msg(max_ulp(got, ref, M * N, &nd) == 0 && nd == 0,
                                      "%s s%d tp%d rank %d %s: 2-byte weights differ", g_dtname, si, k, r,
                                      k_be_names[bi]);
                    }
            }
            /* a slice outside K is refused */
            ck_assert_int_eq(g_be[1]->ops->matmul_kslice(g_be[1], s.x, M, K, K - Ks + 1, Ks, rc_wt_f32(s.w), N, NULL,
                                                         g_dt, g_dt, got),
                             RC_ERR_INTERNAL);
            free(P), free(P0b), free(got), free(ref), free(xs), free(ws);
        }
        free(w16);
        free_shape(&s);
    }
    printf("%s K-slice GEMMs vs torch: max %lld ulp, %lld of %lld outputs differ bitwise\n", g_dtname,
           (long long)worst, (long long)n_diff_all, (long long)n_all);
    close_file();
}
END_TEST

/* The reduce, fed torch's partials: torch's bits, every mode and side, in
 * one call and in two row chunks; at tp 2 every mode is RN(P0 + P1). */
START_TEST(test_reduce)
{
    open_file(_i);
    rc_backend *be = g_be[1];
    int64_t checked = 0;
    for (int si = 0; si < 2; si++) {
        shape_in s = get_shape(si);
        const int64_t M = s.M, N = s.N, MN = M * N;
        int64_t *zeros = calloc((size_t)M, sizeof *zeros);
        for (int k = 2; k <= 8; k++) {
            char n[96];
            snprintf(n, sizeof n, "s%d.tp%d.P", si, k);
            if (!has(n))
                continue;
            float *P = get(n, NULL, NULL);
            snprintf(n, sizeof n, "s%d.tp%d.P0b", si, k);
            float *P0b = get(n, NULL, NULL);
            float *parts = malloc(sizeof(float) * (size_t)(k * MN)), *y = malloc(sizeof(float) * (size_t)MN);
            float *y2 = malloc(sizeof(float) * (size_t)MN), *first = malloc(sizeof(float) * (size_t)MN);
            for (int side = 0; side < 2; side++) /* 0: sampler, 1: trainer */
                for (int mi = 0; mi < 4; mi++) {
                    snprintf(n, sizeof n, "s%d.tp%d.%s.%s", si, k, k_modes[mi], side ? "trainer" : "sampler");
                    float *want = get(n, NULL, NULL);
                    const rc_numerics num = tp_num(k, k_mode_ids[mi], side == 1);
                    const float *bias = side ? s.b : NULL;
                    memcpy(parts, P, sizeof(float) * (size_t)(k * MN));
                    if (!side)
                        memcpy(parts, P0b, sizeof(float) * (size_t)MN);
                    ck_assert(rc_tp_reduce_partials(be, &num, parts, M, N, bias, g_dt, 0, MN, zeros, y) == RC_OK);
                    int64_t nd, u = max_ulp(y, want, MN, &nd);
                    ck_assert_msg(nd == 0, "%s: %lld of %lld differ from torch (max %lld ulp)", n, (long long)nd,
                                  (long long)MN, (long long)u);
                    /* rows [0, m1) and [m1, M) as two calls: the ring's chunks are the whole tensor's */
                    const int64_t m1 = M / 2 + 1;
                    for (int part = 0; part < 2; part++) {
                        const int64_t r0 = part ? m1 : 0, rows = part ? M - m1 : m1;
                        float *pc = malloc(sizeof(float) * (size_t)(k * rows * N));
                        for (int r = 0; r < k; r++)
                            memcpy(pc + r * rows * N, (r == 0 && !side ? P0b : P + r * MN) + r0 * N,
                                   sizeof(float) * (size_t)(rows * N));
                        ck_assert(rc_tp_reduce_partials(be, &num, pc, rows, N, bias, g_dt, r0 * N, MN, zeros,
                                                        y2 + r0 * N) == RC_OK);
                        free(pc);
                    }
                    ck_assert_msg(max_ulp(y2, want, MN, &nd) == 0 && nd == 0, "%s: in two row chunks", n);
                    if (k == 2) { /* every mode the same bits */
                        if (mi == 0)
                            memcpy(first, y, sizeof(float) * (size_t)MN);
                        else
                            ck_assert_msg(memcmp(first, y, sizeof(float) * (size_t)MN) == 0, "%s: tp 2 not RN(P0+P1)",
                                          n);
                    }
                    checked += MN;
                    free(want);
                }
            free(P), free(P0b), free(parts), free(y), free(y2), free(first);
        }
        free(zeros);
        free_shape(&s);
    }
    printf("%s TP reduce vs torch: %lld outputs (4 modes, 2 sides, tp 2-8) bitwise\n", g_dtname, (long long)checked);
    close_file();
}
END_TEST

/* rc_row_parallel_linear end to end: ratiocheck's partials, then the
 * reduce. Bitwise torch's wherever every partial is; tp 1 is one matmul. */
START_TEST(test_row_parallel)
{
    open_file(_i);
    int64_t n_same_parts = 0, n_diff = 0, n_all = 0;
    for (int bi = 0; bi < 3; bi++) {
        rc_backend *be = g_be[bi];
        for (int si = 0; si < 2; si++) {
            shape_in s = get_shape(si);
            const int64_t M = s.M, K = s.K, N = s.N, MN = M * N;
            int64_t *zeros = calloc((size_t)M, sizeof *zeros);
            float *y = malloc(sizeof(float) * (size_t)MN), *ref = malloc(sizeof(float) * (size_t)MN);
            float *parts = malloc(sizeof(float) * (size_t)(8 * MN));
            /* tp 1: the plain matmul, bias fused */
            rc_numerics one = tp_num(1, RC_TP_REDUCE_RING, true);
            ck_assert(rc_row_parallel_linear(be, &one, s.x, M, K, rc_wt_f32(s.w), N, s.b, g_dt, g_dt, 0, MN, NULL,
                                             NULL, y) == RC_OK);
            ck_assert(be->ops->matmul(be, s.x, M, K, rc_wt_f32(s.w), N, s.b, g_dt, g_dt, ref) == RC_OK);
            ck_assert(memcmp(y, ref, sizeof(float) * (size_t)MN) == 0);
            for (int k = 2; k <= 8; k++) {
                char n[96];
                snprintf(n, sizeof n, "s%d.tp%d.P", si, k);
                if (!has(n))
                    continue;
                float *P = get(n, NULL, NULL);
                snprintf(n, sizeof n, "s%d.tp%d.P0b", si, k);
                float *P0b = get(n, NULL, NULL);
                for (int side = 0; side < 2; side++)
                    for (int mi = 0; mi < 4; mi++) {
                        snprintf(n, sizeof n, "s%d.tp%d.%s.%s", si, k, k_modes[mi], side ? "trainer" : "sampler");
                        float *want = get(n, NULL, NULL);
                        const rc_numerics num = tp_num(k, k_mode_ids[mi], side == 1);
                        ck_assert(rc_row_parallel_linear(be, &num, s.x, M, K, rc_wt_f32(s.w), N, s.b, g_dt, g_dt, 0,
                                                         MN, parts, zeros, y) == RC_OK);
                        /* this call's partials again (the reduce overwrote rank 0's) */
                        const int64_t Ks = K / k;
                        for (int r = 0; r < k; r++)
                            ck_assert(be->ops->matmul_kslice(be, s.x, M, K, r * Ks, Ks, rc_wt_f32(s.w), N,
                                                             r == 0 && !side ? s.b : NULL, g_dt, g_dt,
                                                             parts + r * MN) == RC_OK);
                        for (int64_t i = 0; i < MN; i++) {
                            bool same = true;
                            for (int r = 0; r < k; r++) {
                                const float t = r == 0 && !side ? P0b[i] : P[r * MN + i];
                                same = same && rc_f32_bits(parts[r * MN + i]) == rc_f32_bits(t);
                            }
                            const bool eq = rc_f32_bits(y[i]) == rc_f32_bits(want[i]);
                            ck_assert_msg(!same || eq, "%s %s element %lld: the partials are torch's, the sum not",
                                          n, k_be_names[bi], (long long)i);
                            n_same_parts += same;
                            n_diff += !eq;
                            n_all++;
                        }
                        free(want);
                    }
                free(P), free(P0b);
            }
            free(zeros), free(y), free(ref), free(parts);
            free_shape(&s);
        }
    }
    printf("%s row-parallel linear vs torch: %lld of %lld outputs differ (%lld with every partial bitwise torch's: "
           "all equal)\n", g_dtname, (long long)n_diff, (long long)n_all, (long long)n_same_parts);
    close_file();
}
END_TEST

/* which TP degrees a model allows: heads, intermediate, KV heads (vLLM
 * replicates KV heads when tp is a multiple of them; Megatron does not) */
START_TEST(test_tp_check)
{
    rc_config c = {0};
    c.n_heads = 8, c.n_kv_heads = 2, c.intermediate = 96;
    rc_numerics s = rc_numerics_fp32(), t = rc_numerics_fp32();
    t.tp_trainer = true;
    const struct {
        int tp;
        rc_status sampler, trainer;
    } rows[] = {{0, RC_OK, RC_OK},
                {1, RC_OK, RC_OK},
                {2, RC_OK, RC_OK},
                {4, RC_OK, RC_ERR_UNSUPPORTED}, /* KV heads replicated: vLLM yes, Megatron no */
                {8, RC_OK, RC_ERR_UNSUPPORTED},
                {3, RC_ERR_UNSUPPORTED, RC_ERR_UNSUPPORTED},
                {16, RC_ERR_UNSUPPORTED, RC_ERR_UNSUPPORTED},
                {RC_TP_MAX + 1, RC_ERR_UNSUPPORTED, RC_ERR_UNSUPPORTED}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        s.tp = t.tp = rows[i].tp;
        ck_assert_msg(rc_tp_check(&c, &s) == rows[i].sampler, "sampler tp=%d", rows[i].tp);
        ck_assert_msg(rc_tp_check(&c, &t) == rows[i].trainer, "trainer tp=%d", rows[i].tp);
    }
    c.intermediate = 100; /* 8 heads, but 100 / 8 is not whole */
    s.tp = 8;
    ck_assert_int_eq(rc_tp_check(&c, &s), RC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "intermediate size 100 is not divisible by 8"));
    rc_tp_reduce m;
    ck_assert(rc_parse_tp_reduce("chain", &m) == RC_OK && m == RC_TP_REDUCE_CHAIN);
    ck_assert_str_eq(rc_tp_reduce_name(RC_TP_REDUCE_SEQ), "seq");
    ck_assert_int_eq(rc_parse_tp_reduce("tree", &m), RC_ERR_USAGE);
}
END_TEST

int main(void)
{
    if (rc_test_no_blas("test_tp (its fixture compares the three CPU strategies, blas among them)"))
        return RC_TEST_SKIP;
    Suite *s = suite_create("tp");
    TCase *tc = tcase_create("vs_pytorch");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_partials, 0, 2);
    tcase_add_loop_test(tc, test_reduce, 0, 2);
    tcase_add_loop_test(tc, test_row_parallel, 0, 2);
    tcase_add_test(tc, test_tp_check);
    suite_add_tcase(s, tc);
    return rc_test_run(s);
}
