/* The MoE rules (routing and weighted accumulation) against PyTorch, bit for
 * bit, on bf16 cases from transformers' own blocks
 * (data/fixtures/moe_ops/, tools/fixtures/make_moe_op_fixtures.py): the routing op on
 * PyTorch's router logits gives torch.topk's experts and the router's
 * weights; the accumulation op over PyTorch's per-expert outputs, in the
 * eager experts loop's order, gives the block's output (Qwen2-MoE's shared
 * expert included). The grouped sigmoid router of GLM-4.5 and DeepSeek-V3
 * (data/fixtures/grouped_router/, tools/fixtures/make_grouped_router_fixtures.py):
 * the same experts, fp32 weights within a few ulp (PyTorch's sigmoid uses
 * its vectorised exp), and the block's bf16 output bit for bit. */
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

/* ---- the grouped sigmoid router (GLM-4.5, DeepSeek-V3): data/fixtures/grouped_router/ ---- */

static const char *const k_gcases[] = {"glm45_e160k8", "dsv3_e256k8_g8", "odd_e8k3_g2", "nonorm_e6k2",
                                       "ties_e64k5_g4"};
#define N_GCASES (int)(sizeof k_gcases / sizeof k_gcases[0])
/* fp32 ulps between our router weights and torch's: the sigmoid's exp (torch's vectorised Sleef expf against
 * expf, an ulp apart on some inputs), the renormalising sum (torch adds the k weights in topk(sorted=False)'s
 * order, the op in its own) and the division each add at most an ulp or so; measured max 3 (printed) */
#define GROUPED_MAX_ULP 4

static rc_safetensors *open_gcases(void)
{
    char p[4096];
    rc_safetensors *st;
    rc_test_source_path(p, sizeof p, "data/fixtures/grouped_router/grouped_router_bf16.safetensors");
    ck_assert_msg(rc_st_open_file(p, &st) == RC_OK, "%s", rc_last_error());
    return st;
}

static void gget_i32(rc_safetensors *st, int c, const char *what, int64_t n, int32_t *out)
{
    char name[128];
    snprintf(name, sizeof name, "%s.%s", k_gcases[c], what);
    const rc_st_tensor *t = rc_st_find(st, name);
    ck_assert_msg(t != NULL, "%s missing", name);
    int64_t m;
    ck_assert(rc_numel(t->shape, t->ndim, &m) && m == n);
    ck_assert_msg(rc_st_read_i32(st, name, t->ndim, t->shape, out) == RC_OK, "%s", rc_last_error());
}

static float *gget(rc_safetensors *st, int c, const char *what, int64_t *n)
{
    char name[128];
    snprintf(name, sizeof name, "%s.%s", k_gcases[c], what);
    return rc_test_st_f32(st, name, n);
}

static rco_grouped_router gcase_router(rc_safetensors *st, int c, int64_t *T, int64_t *H)
{
    int32_t meta[7];
    gget_i32(st, c, "meta", 7, meta);
    int64_t n;
    float *sc = gget(st, c, "scale", &n); /* float64 in the file: routed_scaling_factor, read as fp32 */
    ck_assert_int_eq(n, 1);
    const rco_grouped_router g = {meta[0], meta[1], meta[2], meta[3], meta[4], sc[0], RC_F32};
    free(sc);
    *H = meta[5];
    *T = meta[6];
    return g;
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* routing: the experts of Glm4MoeTopkRouter / DeepseekV3TopkRouter as a set per row (a row with a tie at the
 * choice's boundary may pick another of the tied experts: torch's topk picks by its partial sort), their fp32
 * weights within GROUPED_MAX_ULP of torch's; the replay form (the recorded experts given) the same */
START_TEST(test_grouped_route_vs_torch)
{
    rc_safetensors *st = open_gcases();
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    int64_t T, H, n;
    const rco_grouped_router g = gcase_router(st, _i, &T, &H);
    const int64_t E = g.E, k = g.top_k;
    float *logits = gget(st, _i, "router_logits", &n);
    ck_assert_int_eq(n, T * E);
    float *bias = gget(st, _i, "e_bias", &n);
    ck_assert_int_eq(n, E);
    float *tw = gget(st, _i, "topk_w", &n);
    int32_t *ti = malloc(sizeof(int32_t) * (size_t)(T * k)), *ties = malloc(sizeof(int32_t) * (size_t)T);
    gget_i32(st, _i, "topk_idx", T * k, ti);
    gget_i32(st, _i, "ties", T, ties);
    float *sel = malloc(sizeof(float) * (size_t)(T * k)), *w = malloc(sizeof(float) * (size_t)(T * k));
    float *fsel = malloc(sizeof(float) * (size_t)k), *fw = malloc(sizeof(float) * (size_t)k);
    float *a = malloc(sizeof(float) * (size_t)k), *b = malloc(sizeof(float) * (size_t)k);
    ck_assert(be->ops->moe_route_grouped(be, logits, bias, T, &g, sel, w) == RC_OK);
    int64_t same = 0, tie_rows = 0, max_ulp = 0, max_ulp_forced = 0;
    for (int64_t t = 0; t < T; t++) {
        bool set_eq = true;
        for (int64_t j = 0; j < k; j++) {
            bool found = false;
            for (int64_t i = 0; i < k; i++)
                found = found || (int64_t)sel[t * k + i] == ti[t * k + j];
            set_eq = set_eq && found;
        }
        if (set_eq)
            same++;
        else
            ck_assert_msg(ties[t], "%s row %lld: other experts than torch's without a tie", k_gcases[_i],
                          (long long)t);
        tie_rows += ties[t] != 0;
        /* the weights as multisets (tied experts carry the same weight, whichever the sides picked) */
        memcpy(a, w + t * k, sizeof(float) * (size_t)k);
        memcpy(b, tw + t * k, sizeof(float) * (size_t)k);
        qsort(a, (size_t)k, sizeof *a, cmp_float);
        qsort(b, (size_t)k, sizeof *b, cmp_float);
        for (int64_t j = 0; j < k; j++) {
            const int64_t u = llabs((long long)rc_f32_bits(a[j]) - (long long)rc_f32_bits(b[j]));
            max_ulp = u > max_ulp ? u : max_ulp;
        }
        /* replay: torch's experts given, in torch's order */
        for (int64_t j = 0; j < k; j++)
            fsel[j] = (float)ti[t * k + j];
        rco_moe_route_grouped_forced_row(logits + t * E, &g, fsel, fw);
        for (int64_t j = 0; j < k; j++) {
            const int64_t u = llabs((long long)rc_f32_bits(fw[j]) - (long long)rc_f32_bits(tw[t * k + j]));
            max_ulp_forced = u > max_ulp_forced ? u : max_ulp_forced;
        }
    }
    printf("moe_route_grouped %s: %lld of %lld rows pick torch's experts (%lld rows tie at the boundary), "
           "weights max %lld fp32 ulp from torch, replayed weights max %lld\n",
           k_gcases[_i], (long long)same, (long long)T, (long long)tie_rows, (long long)max_ulp,
           (long long)max_ulp_forced);
    ck_assert_int_le(max_ulp, GROUPED_MAX_ULP);
    ck_assert_int_le(max_ulp_forced, GROUPED_MAX_ULP);
    free(logits);
    free(bias);
    free(tw);
    free(ti);
    free(ties);
    free(sel);
    free(w);
    free(fsel);
    free(fw);
    free(a);
    free(b);
    rc_backend_destroy(be);
    rc_st_close(st);
}
END_TEST

/* ---- DeepSeek-V3's gate in bf16 (vLLM's default): data/fixtures/grouped_router_gate_dt/ ---- */

static const char *const k_dtcases[] = {"dsv3_gate_e256k8_g8", "kimi_gate_e64k6_g1", "odd_gate_e12k3_g3"};
#define N_DTCASES (int)(sizeof k_dtcases / sizeof k_dtcases[0])

static float *dtget(rc_safetensors *st, int c, const char *what, int64_t want)
{
    char name[128];
    int64_t n;
    snprintf(name, sizeof name, "%s.%s", k_dtcases[c], what);
    float *v = rc_test_st_f32(st, name, &n);
    ck_assert_msg(n == want, "%s: %lld values, want %lld", name, (long long)n, (long long)want);
    return v;
}

static void dtget_i32(rc_safetensors *st, int c, const char *what, int64_t n, int32_t *out)
{
    char name[128];
    snprintf(name, sizeof name, "%s.%s", k_dtcases[c], what);
    const rc_st_tensor *t = rc_st_find(st, name);
    ck_assert_msg(t != NULL, "%s missing", name);
    int64_t m;
    ck_assert(rc_numel(t->shape, t->ndim, &m) && m == n);
    ck_assert_msg(rc_st_read_i32(st, name, t->ndim, t->shape, out) == RC_OK, "%s", rc_last_error());
}

/* the engine's router=dtype on DeepSeek-V3 (moe.c with a bf16 gate weight): the grouped route on torch's bf16
 * logits (F.linear in bf16) gives transformers' DeepseekV3TopkRouter's experts on them (as a set per row; the
 * cases have no tie at the boundary) and its fp32 weights within GROUPED_MAX_ULP (the sigmoid's exp, as above);
 * the engine's bf16 GEMM (fp32 accumulation in its own order, rounded once) gives torch's logits or, where the two
 * fp32 sums fall on either side of a bf16 rounding boundary, the neighbouring bf16 value (counted) */
START_TEST(test_gate_dt_vs_torch)
{
    char p[4096];
    rc_safetensors *st;
    rc_test_source_path(p, sizeof p, "data/fixtures/grouped_router_gate_dt/gate_dt_bf16.safetensors");
    ck_assert_msg(rc_st_open_file(p, &st) == RC_OK, "%s", rc_last_error());
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    int32_t meta[7];
    dtget_i32(st, _i, "meta", 7, meta);
    float *sc = dtget(st, _i, "scale", 1);
    const rco_grouped_router g = {meta[0], meta[1], meta[2], meta[3], meta[4], sc[0], RC_F32};
    free(sc);
    const int64_t E = g.E, k = g.top_k, H = meta[5], T = meta[6];
    float *x = dtget(st, _i, "x", T * H), *gw = dtget(st, _i, "gate_w", E * H), *tl = dtget(st, _i, "logits", T * E);
    float *bias = dtget(st, _i, "e_bias", E), *tw = dtget(st, _i, "topk_w", T * k);
    int32_t *ti = malloc(sizeof(int32_t) * (size_t)(T * k)), *ties = malloc(sizeof(int32_t) * (size_t)T);
    dtget_i32(st, _i, "topk_idx", T * k, ti);
    dtget_i32(st, _i, "ties", T, ties);
    uint16_t *w16 = malloc(sizeof(uint16_t) * (size_t)(E * H));
    rc_wt_convert((rc_wt){gw, RC_F32, false}, 0, E * H, RC_BF16, RC_BF16, w16);
    float *lg = malloc(sizeof(float) * (size_t)(T * E)), *sel = malloc(sizeof(float) * (size_t)(T * k));
    float *w = malloc(sizeof(float) * (size_t)(T * k)), *a = malloc(sizeof(float) * (size_t)k);
    float *b = malloc(sizeof(float) * (size_t)k);
    ck_assert(be->ops->matmul(be, x, T, H, (rc_wt){w16, RC_BF16, false}, E, NULL, RC_BF16, RC_BF16, lg) == RC_OK);
    int64_t diff = 0;
    for (int64_t i = 0; i < T * E; i++) {
        const int64_t u = llabs((long long)rc_f32_bits(lg[i]) - (long long)rc_f32_bits(tl[i]));
        ck_assert_msg(u == 0 || u == 1 << 16, "%s logit %lld: %.9g, torch's %.9g", k_dtcases[_i], (long long)i,
                      (double)lg[i], (double)tl[i]);
        diff += u != 0;
    }
    ck_assert(be->ops->moe_route_grouped(be, tl, bias, T, &g, sel, w) == RC_OK);
    int64_t max_ulp = 0, tie_rows = 0;
    for (int64_t t = 0; t < T; t++) {
        tie_rows += ties[t] != 0;
        for (int64_t j = 0; j < k; j++) {
            bool found = false;
            for (int64_t i = 0; i < k; i++)
                found = found || (int64_t)sel[t * k + i] == ti[t * k + j];
            ck_assert_msg(found || ties[t], "%s row %lld: expert %d of torch's not chosen", k_dtcases[_i],
                          (long long)t, ti[t * k + j]);
        }
        memcpy(a, w + t * k, sizeof(float) * (size_t)k);
        memcpy(b, tw + t * k, sizeof(float) * (size_t)k);
        qsort(a, (size_t)k, sizeof *a, cmp_float);
        qsort(b, (size_t)k, sizeof *b, cmp_float);
        for (int64_t j = 0; j < k; j++) {
            const int64_t u = llabs((long long)rc_f32_bits(a[j]) - (long long)rc_f32_bits(b[j]));
            max_ulp = u > max_ulp ? u : max_ulp;
        }
    }
    printf("gate in bf16 %s: %lld of %lld logits a bf16 ulp from torch's F.linear, %lld rows tie, "
           "weights max %lld fp32 ulp from DeepseekV3TopkRouter's\n",
           k_dtcases[_i], (long long)diff, (long long)(T * E), (long long)tie_rows, (long long)max_ulp);
    ck_assert_int_le(max_ulp, GROUPED_MAX_ULP);
    free(x), free(gw), free(tl), free(bias), free(tw), free(ti), free(ties), free(w16), free(lg), free(sel);
    free(w), free(a), free(b);
    rc_backend_destroy(be);
    rc_st_close(st);
}
END_TEST

/* accumulate the experts' outputs in index order with the given fp32 weights (sel / w: [T, k]), then the
 * shared experts' output, in bf16; returns the outputs that differ from the block's */
static int64_t grouped_block(rc_backend *be, rc_safetensors *st, int c, int64_t T, int64_t H, int64_t E, int64_t k,
                             const int32_t *sel, const float *w, const float *y)
{
    int64_t n;
    float *want = gget(st, c, "out", &n), *sh = gget(st, c, "shared_out", &n);
    float *out = malloc(sizeof(float) * (size_t)(T * H)), *ye = malloc(sizeof(float) * (size_t)(T * H));
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)T), *widx = malloc(sizeof(int64_t) * (size_t)T);
    ck_assert(rc_cpu_zero(be, out, T * H) == RC_OK);
    for (int64_t e = 0; e < E; e++) {
        int64_t m = 0;
        for (int64_t j = 0; j < k; j++)
            for (int64_t t = 0; t < T; t++)
                if (sel[t * k + j] == e) {
                    rows[m] = t;
                    widx[m] = t * k + j;
                    memcpy(ye + m * H, y + (t * k + j) * H, sizeof(float) * (size_t)H);
                    m++;
                }
        ck_assert(rc_cpu_moe_accumulate(be, ye, m, H, rows, w, widx, false, RC_BF16, out) == RC_OK);
    }
    ck_assert(be->ops->add(be, out, sh, T * H, RC_BF16, out) == RC_OK); /* hidden_states + shared_experts(...) */
    int64_t diff = 0;
    for (int64_t i = 0; i < T * H; i++)
        diff += rc_f32_bits(out[i]) != rc_f32_bits(want[i]);
    free(want);
    free(sh);
    free(out);
    free(ye);
    free(rows);
    free(widx);
    return diff;
}

/* the block's bf16 output: from PyTorch's per-expert outputs and torch's weights bit for bit (the
 * accumulation rule: expert output (bf16) x fp32 weight, rounded to bf16, index_add_ in bf16, then the shared
 * experts added); with the op's own experts and weights from the logits, also bit for bit on every case */
START_TEST(test_grouped_block_vs_torch)
{
    rc_safetensors *st = open_gcases();
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    int64_t T, H, n;
    const rco_grouped_router g = gcase_router(st, _i, &T, &H);
    const int64_t E = g.E, k = g.top_k;
    float *tw = gget(st, _i, "topk_w", &n), *y = gget(st, _i, "expert_out", &n);
    ck_assert_int_eq(n, T * k * H);
    float *logits = gget(st, _i, "router_logits", &n), *bias = gget(st, _i, "e_bias", &n);
    int32_t *ti = malloc(sizeof(int32_t) * (size_t)(T * k)), *oi = malloc(sizeof(int32_t) * (size_t)(T * k));
    gget_i32(st, _i, "topk_idx", T * k, ti);
    const int64_t diff_torch_w = grouped_block(be, st, _i, T, H, E, k, ti, tw, y);
    /* the op's routing; where a tie made it pick another of the tied experts the expert outputs of that slot
     * are not in the file: the row keeps torch's experts and takes the op's weights by expert */
    float *sel = malloc(sizeof(float) * (size_t)(T * k)), *w = malloc(sizeof(float) * (size_t)(T * k));
    float *ow = malloc(sizeof(float) * (size_t)(T * k));
    ck_assert(be->ops->moe_route_grouped(be, logits, bias, T, &g, sel, w) == RC_OK);
    int64_t rows_own = 0;
    for (int64_t t = 0; t < T; t++) {
        bool all = true;
        for (int64_t j = 0; j < k; j++) {
            int64_t at = -1;
            for (int64_t i = 0; i < k; i++)
                at = (int64_t)sel[t * k + i] == ti[t * k + j] ? i : at;
            all = all && at >= 0;
            oi[t * k + j] = ti[t * k + j];
            ow[t * k + j] = at >= 0 ? w[t * k + at] : tw[t * k + j];
        }
        rows_own += all;
    }
    const int64_t diff_own_w = grouped_block(be, st, _i, T, H, E, k, oi, ow, y);
    printf("moe_grouped_block %s: %lld of %lld outputs differ from the block's with torch's weights, %lld with the "
           "op's (%lld of %lld rows routed by the op alone)\n",
           k_gcases[_i], (long long)diff_torch_w, (long long)(T * H), (long long)diff_own_w, (long long)rows_own,
           (long long)T);
    ck_assert_int_eq(diff_torch_w, 0);
    ck_assert_int_eq(diff_own_w, 0);
    free(tw);
    free(y);
    free(logits);
    free(bias);
    free(ti);
    free(oi);
    free(sel);
    free(w);
    free(ow);
    rc_backend_destroy(be);
    rc_st_close(st);
}
END_TEST

/* a selection bias or logits that are not finite (a hostile checkpoint) still give k distinct experts of
 * the kept groups' count, each in range */
START_TEST(test_grouped_route_nonfinite)
{
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    enum { E = 12, K = 4, M = 3 };
    const rco_grouped_router g = {E, K, 4, 2, 1, 2.5f, RC_F32};
    float lg[M * E], bias[E], sel[M * K], w[M * K];
    for (int i = 0; i < M * E; i++)
        lg[i] = (float)((i * 7) % 11) - 5.0f;
    for (int e = 0; e < E; e++) /* every group holds a +inf (a group score of +inf); one NaN */
        bias[e] = e % 3 == 0 ? INFINITY : e % 3 == 1 ? 0.0f : -INFINITY;
    bias[4] = NAN;
    lg[E + 2] = NAN;
    lg[2 * E + 5] = INFINITY;
    ck_assert(rc_cpu_moe_route_grouped(be, lg, bias, M, &g, sel, w) == RC_OK);
    for (int r = 0; r < M; r++)
        for (int j = 0; j < K; j++) {
            ck_assert(sel[r * K + j] >= 0.0f && sel[r * K + j] < (float)E);
            for (int i = 0; i < j; i++)
                ck_assert(sel[r * K + i] != sel[r * K + j]);
        }
    rc_backend_destroy(be);
}
END_TEST

static Suite *moe_suite(void)
{
    Suite *s = suite_create("moe");
    TCase *tc = tcase_create("vs_torch");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_moe_route_vs_torch, 0, N_CASES);
    tcase_add_loop_test(tc, test_moe_accumulate_vs_torch, 0, N_CASES);
    tcase_add_loop_test(tc, test_grouped_route_vs_torch, 0, N_GCASES);
    tcase_add_loop_test(tc, test_grouped_block_vs_torch, 0, N_GCASES);
    tcase_add_loop_test(tc, test_gate_dt_vs_torch, 0, N_DTCASES);
    tcase_add_test(tc, test_grouped_route_nonfinite);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return rc_test_run(moe_suite()); }
