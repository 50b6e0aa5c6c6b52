/* The MoE rule (routing and weighted accumulation) against PyTorch, bit for
 * bit, on bf16 cases from transformers' own blocks
 * (data/fixtures/moe_ops/, tools/fixtures/make_moe_op_fixtures.py): the routing op on
 * PyTorch's router logits gives torch.topk's experts and the router's
 * weights; the accumulation op over PyTorch's per-expert outputs, in the
 * eager experts loop's order, gives the block's output (Qwen2-MoE's shared
 * expert included). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "moe.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"

static const char *const k_cases[] = {"qwen2_e6k3", "qwen2_e64k8_norm", "mixtral_e8k2", "qwen2_e128k8_ties"};
#define N_CASES (int)(sizeof k_cases / sizeof k_cases[0])

static rc_safetensors *open_cases(void)
{
    char p[4096];
    rc_safetensors *st;
    rc_test_source_path(p, sizeof p, "data/fixtures/moe_ops/moe_ops_bf16.safetensors");
    ck_assert_msg(rc_st_open_file(p, &st) == RC_OK, "%s", rc_last_error());
    return st;
}

static float *get(rc_safetensors *st, int c, const char *what, int64_t *n)
{
    char name[128];
    snprintf(name, sizeof name, "%s.%s", k_cases[c], what);
    return rc_test_st_f32(st, name, n);
}

static void get_i32(rc_safetensors *st, int c, const char *what, int64_t n, int32_t *out)
{
    char name[128];
    snprintf(name, sizeof name, "%s.%s", k_cases[c], what);
    const rc_st_tensor *t = rc_st_find(st, name);
    ck_assert_msg(t != NULL, "%s missing", name);
    int64_t m;
    ck_assert(rc_numel(t->shape, t->ndim, &m) && m == n);
    ck_assert_msg(rc_st_read_i32(st, name, t->ndim, t->shape, out) == RC_OK, "%s", rc_last_error());
}

/* routing: torch.topk's experts as a set per row and the router's weights bit for bit; a row whose
 * k-th and (k+1)-th probabilities tie may pick another of the tied experts (torch's CPU topk picks
 * by its partial sort), with the same weight value */
START_TEST(test_moe_route_vs_torch)
{
    rc_safetensors *st = open_cases();
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    int32_t meta[6];
    get_i32(st, _i, "meta", 6, meta);
    const int64_t E = meta[0], k = meta[1], T = meta[4];
    const bool renorm = meta[2] != 0, mixtral = meta[5] != 0;
    int64_t n;
    float *logits = get(st, _i, "router_logits", &n);
    ck_assert_int_eq(n, T * E);
    float *tw = get(st, _i, "topk_w", &n);
    int32_t *ti = malloc(sizeof(int32_t) * (size_t)(T * k));
    get_i32(st, _i, "topk_idx", T * k, ti);
    float *sel = malloc(sizeof(float) * (size_t)(T * k)), *w = malloc(sizeof(float) * (size_t)(T * k));
    float *p = malloc(sizeof(float) * (size_t)E);
    ck_assert(rc_cpu_moe_route(be, logits, T, E, k, renorm, mixtral ? RC_F32 : RC_BF16, sel, w) == RC_OK);
    int64_t same = 0, tie_rows = 0, max_ulp = 0;
    for (int64_t t = 0; t < T; t++) {
        /* our probabilities, to tell a tie at the k-th place */
        float psel[64] = {0}, ssel[64] = {0};
        ck_assert(k <= 64);
        rco_moe_route_row(logits + t * E, E, k, 0, RC_F32, p, ssel, psel);
        const float kth = psel[k - 1];
        int ties_at_k = 0;
        for (int64_t e = 0; e < E; e++)
            ties_at_k += p[e] == kth;
        bool set_eq = true;
        for (int64_t j = 0; j < k; j++) {
            bool found = false;
            for (int64_t i = 0; i < k; i++)
                found = found || (int64_t)sel[t * k + i] == ti[t * k + j];
            set_eq = set_eq && found;
        }
        /* weights by top-k position (equal whatever the tied experts' order): bf16 ones bit for bit;
         * Mixtral's stay fp32, where PyTorch's vectorised exp differs from expf by an ulp (the softmax
         * rule of docs/numerics.md): counted in fp32 ulps */
        for (int64_t j = 0; j < k; j++) {
            const int64_t u = llabs((long long)rc_f32_bits(w[t * k + j]) - (long long)rc_f32_bits(tw[t * k + j]));
            max_ulp = u > max_ulp ? u : max_ulp;
            ck_assert_msg(mixtral || u == 0, "%s row %lld slot %lld: weight %.9g, torch %.9g", k_cases[_i],
                          (long long)t, (long long)j, (double)w[t * k + j], (double)tw[t * k + j]);
        }
        if (set_eq)
            same++;
        else
            ck_assert_msg(ties_at_k > 1, "%s row %lld: other experts than torch.topk's without a tie",
                          k_cases[_i], (long long)t);
        tie_rows += ties_at_k > 1;
    }
    printf("moe_route %s: %lld of %lld rows pick torch.topk's experts (%lld rows tie at the k-th "
           "probability), weights: max %lld fp32 ulp from torch (%s)\n",
           k_cases[_i], (long long)same, (long long)T, (long long)tie_rows, (long long)max_ulp,
           mixtral ? "fp32 weights" : "bf16 weights, bitwise");
    free(logits);
    free(tw);
    free(ti);
    free(sel);
    free(w);
    free(p);
    rc_backend_destroy(be);
    rc_st_close(st);
}
END_TEST

/* accumulation: the experts in index order, each over its rows, then the shared expert, equal to the
 * block's output bit for bit */
START_TEST(test_moe_accumulate_vs_torch)
{
    rc_safetensors *st = open_cases();
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    int32_t meta[6];
    get_i32(st, _i, "meta", 6, meta);
    const int64_t E = meta[0], k = meta[1], H = meta[3], T = meta[4];
    const bool mixtral = meta[5] != 0;
    int64_t n;
    float *tw = get(st, _i, "topk_w", &n);
    float *y = get(st, _i, "expert_out", &n);
    ck_assert_int_eq(n, T * k * H);
    float *want = get(st, _i, "out", &n);
    int32_t *ti = malloc(sizeof(int32_t) * (size_t)(T * k));
    get_i32(st, _i, "topk_idx", T * k, ti);
    float *out = malloc(sizeof(float) * (size_t)(T * H)), *ye = malloc(sizeof(float) * (size_t)(T * H));
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)T), *widx = malloc(sizeof(int64_t) * (size_t)T);
    ck_assert(rc_cpu_zero(be, out, T * H) == RC_OK);
    for (int64_t e = 0; e < E; e++) {
        int64_t m = 0;
        for (int64_t j = 0; j < k; j++)
            for (int64_t t = 0; t < T; t++)
                if (ti[t * k + j] == e) {
                    rows[m] = t;
                    widx[m] = t * k + j;
                    memcpy(ye + m * H, y + (t * k + j) * H, sizeof(float) * (size_t)H);
                    m++;
                }
        ck_assert(rc_cpu_moe_accumulate(be, ye, m, H, rows, tw, widx, false, RC_BF16, out) == RC_OK);
    }
    if (!mixtral) {
        float *sh = get(st, _i, "shared_out", &n), *sg = get(st, _i, "shared_gate", &n);
        for (int64_t t = 0; t < T; t++)
            rows[t] = t;
        ck_assert(rc_cpu_moe_accumulate(be, sh, T, H, rows, sg, rows, true, RC_BF16, out) == RC_OK);
        free(sh);
        free(sg);
    }
    int64_t diff = 0;
    for (int64_t i = 0; i < T * H; i++)
        diff += rc_f32_bits(out[i]) != rc_f32_bits(want[i]);
    printf("moe_accumulate %s: %lld of %lld outputs differ from the block's\n", k_cases[_i], (long long)diff,
           (long long)(T * H));
    ck_assert_int_eq(diff, 0);
    free(tw);
    free(y);
    free(want);
    free(ti);
    free(out);
    free(ye);
    free(rows);
    free(widx);
    rc_backend_destroy(be);
    rc_st_close(st);
}
END_TEST

static Suite *moe_suite(void)
{
    Suite *s = suite_create("moe");
    TCase *tc = tcase_create("vs_torch");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_moe_route_vs_torch, 0, N_CASES);
    tcase_add_loop_test(tc, test_moe_accumulate_vs_torch, 0, N_CASES);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return rc_test_run(moe_suite()); }
