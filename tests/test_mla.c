/* Latent attention's absorbed form (mla=absorbed, src/engine/mla.c) against an
 * explicit PyTorch absorbed decode of the same models
 * (data/fixtures/mla/absorbed.safetensors, tools/fixtures/make_mla_fixtures.py:
 * a latent cache, q_nope . W_UK and o . W_UV per head in the model's dtype):
 * the engine's cached decode, one token per step, in fp32 within 1e-5 of it,
 * and in bf16 nearer to it than to transformers' expanded bf16 forward (the
 * asymmetry the setting emulates), while the expanded engine is nearer to the
 * expanded forward. The absorbed products and the latent norm at op level
 * (data/fixtures/mla/ops.safetensors): bit for bit PyTorch's in bf16. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"

static const char *const k_models[] = {"deepseek_v3_mla", "deepseek_v3_qproj"};
#define N_MODELS (int)(sizeof k_models / sizeof k_models[0])

static rc_safetensors *open_fixture(const char *file)
{
    char p[4096];
    rc_safetensors *st;
    rc_test_source_path(p, sizeof p, "data/fixtures/mla/%s", file);
    ck_assert_msg(rc_st_open_file(p, &st) == RC_OK, "%s", rc_last_error());
    return st;
}

/* one token per step through the cache: the next-token log-probs of every position [T, V] */
static float *decode(rc_model *m, rc_backend *be, rc_dtype dt, bool absorbed, const int32_t *tok, int64_t T)
{
    rc_numerics num = rc_numerics_fp32();
    num.dt = dt;
    num.mla_absorbed = absorbed;
    rc_engine *e;
    ck_assert_msg(rc_engine_create(m, be, &num, 1, T, T, &e) == RC_OK, "%s", rc_last_error());
    int64_t nkv = e->kv.n_kv_heads, d = e->kv.head_dim; /* the cache's shape says which form runs */
    ck_assert_int_eq(nkv, absorbed ? 1 : m->cfg.n_heads);
    ck_assert_int_eq(d, absorbed ? m->cfg.kv_lora_rank + m->cfg.qk_rope_dim : m->cfg.head_dim);
    const int64_t V = m->cfg.vocab;
    float *lp = malloc(sizeof(float) * (size_t)(T * V));
    ck_assert(lp != NULL);
    for (int64_t t = 0; t < T; t++) {
        const int64_t slot = 0, one = 1, row = 0;
        ck_assert_msg(rc_engine_step(e, &slot, &t, &one, 1, tok + t, &row, 1, lp + t * V, NULL, NULL) == RC_OK, "%s",
                      rc_last_error());
    }
    rc_engine_free(e);
    return lp;
}

static double max_abs(const float *a, const float *b, int64_t n)
{
    double w = 0;
    for (int64_t i = 0; i < n; i++)
        w = fmax(w, fabs((double)a[i] - (double)b[i]));
    return w;
}

static double mean_abs(const float *a, const float *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += fabs((double)a[i] - (double)b[i]);
    return s / (double)n;
}

START_TEST(test_absorbed_vs_torch)
{
    const char *name = k_models[_i];
    char p[4096], key[160];
    rc_model *m;
    rc_test_source_path(p, sizeof p, "data/fixtures/%s", name);
    ck_assert_msg(rc_model_load(p, &m) == RC_OK, "%s", rc_last_error());
    ck_assert(m->cfg.mla);
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    rc_safetensors *st = open_fixture("absorbed.safetensors");
    snprintf(key, sizeof key, "%s.n_seqs", name);
    int32_t n_seqs;
    ck_assert(rc_st_read_i32(st, key, 1, (int64_t[]){1}, &n_seqs) == RC_OK);
    ck_assert_int_gt(n_seqs, 0);
    const int64_t V = m->cfg.vocab;
    double w32 = 0, abs_vs_abs = 0, abs_vs_exp = 0, exp_vs_exp = 0, exp_vs_abs = 0, torch_gap = 0;
    int64_t positions = 0;
    for (int i = 0; i < n_seqs; i++) {
        int64_t T, n;
        snprintf(key, sizeof key, "%s.seq%d", name, i);
        const rc_st_tensor *tt = rc_st_find(st, key);
        ck_assert(tt != NULL && tt->ndim == 1);
        T = tt->shape[0];
        int32_t *tok = malloc(sizeof(int32_t) * (size_t)T);
        ck_assert(rc_st_read_i32(st, key, 1, &T, tok) == RC_OK);
        snprintf(key, sizeof key, "%s.seq%d.f32", name, i);
        float *ref32 = rc_test_st_f32(st, key, &n);
        ck_assert_int_eq(n, T * V);
        snprintf(key, sizeof key, "%s.seq%d.bf16", name, i);
        float *ref16 = rc_test_st_f32(st, key, &n);
        snprintf(key, sizeof key, "%s.seq%d.bf16_expanded", name, i);
        float *exp16 = rc_test_st_f32(st, key, &n);
        float *a32 = decode(m, be, RC_F32, true, tok, T);
        float *a16 = decode(m, be, RC_BF16, true, tok, T);
        float *e16 = decode(m, be, RC_BF16, false, tok, T);
        w32 = fmax(w32, max_abs(a32, ref32, T * V));
        abs_vs_abs += mean_abs(a16, ref16, T * V) * (double)T;
        abs_vs_exp += mean_abs(a16, exp16, T * V) * (double)T;
        exp_vs_exp += mean_abs(e16, exp16, T * V) * (double)T;
        exp_vs_abs += mean_abs(e16, ref16, T * V) * (double)T;
        torch_gap += mean_abs(ref16, exp16, T * V) * (double)T;
        positions += T;
        free(tok);
        free(ref32);
        free(ref16);
        free(exp16);
        free(a32);
        free(a16);
        free(e16);
    }
    abs_vs_abs /= (double)positions;
    abs_vs_exp /= (double)positions;
    exp_vs_exp /= (double)positions;
    exp_vs_abs /= (double)positions;
    torch_gap /= (double)positions;
    printf("%-18s absorbed fp32 vs torch absorbed max|dlogp| %.3e; bf16 mean|dlogp|: absorbed vs torch absorbed %.3e, "
           "vs HF expanded %.3e; expanded vs HF expanded %.3e, vs torch absorbed %.3e; torch absorbed vs HF expanded "
           "%.3e (%lld positions)\n",
           name, w32, abs_vs_abs, abs_vs_exp, exp_vs_exp, exp_vs_abs, torch_gap, (long long)positions);
    ck_assert_msg(w32 <= 1e-5, "%s: fp32 absorbed decode %.3e from PyTorch's", name, w32);
    ck_assert_msg(abs_vs_abs < abs_vs_exp, "%s: bf16 absorbed nearer HF's expanded (%.3e) than torch's absorbed (%.3e)",
                  name, abs_vs_exp, abs_vs_abs);
    ck_assert_msg(exp_vs_exp < exp_vs_abs, "%s: bf16 expanded nearer torch's absorbed (%.3e) than HF's (%.3e)", name,
                  exp_vs_abs, exp_vs_exp);
    rc_st_close(st);
    rc_backend_destroy(be);
    rc_model_free(m);
}
END_TEST

/* R(x . W^T) of the CPU backend against torch.bmm per head, bit for bit; x [H, M, K] (bf16 values), w [H, K, N]
 * as torch holds it (the engine's weight is its transpose [N, K]) */
static void bmm_case(rc_backend *be, rc_safetensors *st, const char *xn, const char *wn, const char *yn, rc_dtype dt,
                     int64_t H, int64_t M, int64_t K, int64_t N)
{
    int64_t n;
    float *x = rc_test_st_f32(st, xn, &n);
    ck_assert_int_eq(n, H * M * K);
    float *w = rc_test_st_f32(st, wn, &n);
    ck_assert_int_eq(n, H * K * N);
    float *want = rc_test_st_f32(st, yn, &n);
    ck_assert_int_eq(n, H * M * N);
    float *wt = malloc(sizeof(float) * (size_t)(K * N)), *y = malloc(sizeof(float) * (size_t)(M * N));
    int64_t diff = 0;
    for (int64_t h = 0; h < H; h++) {
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                wt[j * K + k] = w[(h * K + k) * N + j];
        ck_assert(be->ops->matmul(be, x + h * M * K, M, K, rc_wt_f32(wt), N, NULL, dt, dt, y) == RC_OK);
        for (int64_t i = 0; i < M * N; i++)
            diff += rc_f32_bits(y[i]) != rc_f32_bits(want[h * M * N + i]);
    }
    printf("mla op %-8s %-16s %lld of %lld differ from torch.bmm\n", rc_dtype_str(dt), yn, (long long)diff,
           (long long)(H * M * N));
    ck_assert_msg(diff == 0, "%s: %lld values differ from torch.bmm", yn, (long long)diff);
    free(x);
    free(w);
    free(want);
    free(wt);
    free(y);
}

START_TEST(test_absorbed_ops_vs_torch)
{
    rc_safetensors *st = open_fixture("ops.safetensors");
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    const int64_t H = 5, M = 7, N = 16, L = 40, V = 12; /* make_ops's shapes, checked by the sizes read */
    bmm_case(be, st, "bmm.bf16.q_nope", "bmm.bf16.w_uk_t", "bmm.bf16.ql", RC_BF16, H, M, N, L);
    bmm_case(be, st, "bmm.bf16.o_lat", "bmm.bf16.w_uv", "bmm.bf16.o", RC_BF16, H, M, L, V);
    /* the latent norm: DeepseekV3RMSNorm(40), eps 1e-6, Llama's rounding order */
    for (int f = 0; f < 2; f++) {
        const char *nm = f ? "bf16" : "f32";
        const rc_dtype dt = f ? RC_BF16 : RC_F32;
        char k[64];
        int64_t n, nw, ny;
        snprintf(k, sizeof k, "norm.%s.x", nm);
        float *x = rc_test_st_f32(st, k, &n);
        snprintf(k, sizeof k, "norm.%s.w", nm);
        float *w = rc_test_st_f32(st, k, &nw);
        snprintf(k, sizeof k, "norm.%s.out", nm);
        float *want = rc_test_st_f32(st, k, &ny);
        ck_assert(n == ny && n % nw == 0);
        float *y = malloc(sizeof(float) * (size_t)n);
        ck_assert(be->ops->norm(be, RC_NORM_RMS, x, n / nw, nw, w, NULL, 1e-6, dt, dt, y) == RC_OK);
        int64_t diff = 0;
        for (int64_t i = 0; i < n; i++)
            diff += rc_f32_bits(y[i]) != rc_f32_bits(want[i]);
        printf("mla op %-8s latent RMSNorm    %lld of %lld differ from DeepseekV3RMSNorm\n", nm, (long long)diff,
               (long long)n);
        ck_assert_int_eq(diff, 0);
        free(x);
        free(w);
        free(want);
        free(y);
    }
    rc_st_close(st);
    rc_backend_destroy(be);
}
END_TEST

/* DeepSeek's interleaved RoPE (apply_rotary_pos_emb_interleave, YaRN with mscale / mscale_all_dim) against
 * the rope op on the values de-interleaved as the loader stores them: the same rotation, bit for bit in bf16 */
START_TEST(test_interleaved_rope_vs_torch)
{
    const rc_dtype dt = _i ? RC_BF16 : RC_F32;
    const char *nm = _i ? "bf16" : "f32";
    rc_safetensors *st = open_fixture("ops.safetensors");
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    /* make_ops's config: its rope settings give the inv_freq and attention factor */
    const char *json = "{\"model_type\":\"deepseek_v3\",\"vocab_size\":128,\"hidden_size\":80,"
                       "\"num_hidden_layers\":2,\"num_attention_heads\":5,\"intermediate_size\":56,"
                       "\"kv_lora_rank\":40,\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":8,\"v_head_dim\":12,"
                       "\"q_lora_rank\":48,\"first_k_dense_replace\":99,\"n_routed_experts\":8,\"n_group\":2,"
                       "\"topk_group\":1,\"num_experts_per_tok\":2,\"max_position_embeddings\":128,"
                       "\"rope_parameters\":{\"rope_type\":\"yarn\",\"rope_theta\":10000.0,\"factor\":4.0,"
                       "\"mscale\":0.8,\"mscale_all_dim\":0.9,\"original_max_position_embeddings\":32}}";
    json_error_t err;
    json_t *root = json_loads(json, 0, &err);
    ck_assert(root != NULL);
    rc_config cfg;
    ck_assert_msg(rc_config_parse(root, "ops config", &cfg) == RC_OK, "%s", rc_last_error());
    json_decref(root);
    float inv[4];
    rc_rope_inv_freq(&cfg, inv);
    char k[64];
    int64_t nq, nk, nc, n;
    snprintf(k, sizeof k, "rope.%s.q", nm);
    float *q = rc_test_st_f32(st, k, &nq); /* [3 heads][T][8], interleaved pairs */
    snprintf(k, sizeof k, "rope.%s.k", nm);
    float *kk = rc_test_st_f32(st, k, &nk); /* [1][T][8] */
    snprintf(k, sizeof k, "rope.%s.cos", nm);
    float *cs = rc_test_st_f32(st, k, &nc); /* [T][8] */
    snprintf(k, sizeof k, "rope.%s.q_out", nm);
    float *qo = rc_test_st_f32(st, k, &n);
    snprintf(k, sizeof k, "rope.%s.k_out", nm);
    float *ko = rc_test_st_f32(st, k, &n);
    const int64_t R = 8, T = nc / R, Hq = nq / (T * R), W = (Hq + 2) * R;
    ck_assert(T >= 2 && Hq >= 1 && nk == T * R);
    float *rows = calloc((size_t)(T * W), sizeof(float));
    int64_t pos[64], seq[64], z = 0, slot = 0, start = 0, nn = T;
    ck_assert(T <= 64);
    for (int64_t t = 0; t < T; t++) {
        pos[t] = t;
        seq[t] = 0;
        for (int64_t h = 0; h <= Hq; h++) /* the loader's de-interleave: [x0, x2, ..., x1, x3, ...] */
            for (int64_t j = 0; j < R; j++) {
                const int64_t src = j < R / 2 ? 2 * j : 2 * (j - R / 2) + 1;
                rows[t * W + h * R + j] = h < Hq ? q[(h * T + t) * R + src] : kk[t * R + src];
            }
    }
    rc_batch_desc bd = {.n_seq = 1, .slot = &slot, .start = &start, .n_new = &nn, .row0 = &z, .n_rows = T,
                        .pos = pos, .seq_of_row = seq};
    rc_attn_params ap = rc_attn_params_from_config(&cfg, inv, dt, dt, &(rc_attn_numerics){dt, dt, dt});
    ap.n_heads = Hq;
    ap.n_kv_heads = 1;
    ap.head_dim = R;
    ck_assert(be->ops->rope(be, rows, &bd, &ap) == RC_OK);
    int64_t diff = 0, total = 0;
    double worst = 0, scale = 0; /* the largest |value| and difference: an fp32 ulp of cos / sin moves a result
                                  * by about an ulp of the inputs, not of a result near 0 */
    for (int64_t i = 0; i < nq; i++)
        scale = fmax(scale, fabs((double)q[i]));
    for (int64_t i = 0; i < nk; i++)
        scale = fmax(scale, fabs((double)kk[i]));
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h <= Hq; h++)
            for (int64_t j = 0; j < R; j++, total++) {
                const float got = rows[t * W + h * R + j], want = h < Hq ? qo[(h * T + t) * R + j] : ko[t * R + j];
                diff += rc_f32_bits(got) != rc_f32_bits(want);
                worst = fmax(worst, fabs((double)got - (double)want));
            }
    printf("mla op %-8s interleaved rope  %lld of %lld differ from apply_rotary_pos_emb_interleave (max |d| %.2e of "
           "inputs up to %.2f)\n", nm, (long long)diff, (long long)total, worst, scale);
    fflush(stdout);
    if (dt == RC_BF16)
        ck_assert_int_eq(diff, 0);
    else /* torch's vectorised cos / sin and cosf / sinf may differ in the last fp32 bit */
        ck_assert(worst <= 2 * 0x1p-23 * scale);
    free(rows);
    free(q);
    free(kk);
    free(cs);
    free(qo);
    free(ko);
    rc_st_close(st);
    rc_backend_destroy(be);
}
END_TEST

/* the CLI's sides: with invariant kernels a sampler and a trainer in one form give every ratio exactly 1 (the
 * cached decode equals the full forward bit for bit), the default sides (sampler absorbed, trainer expanded)
 * do not: the trainer gets its own engine when the forms differ; a model without latent attention takes the
 * key and ignores it */
static double cli_std(const char *model, const char *prompts, const char *extra, char *out, size_t nout)
{
    char args[2048], err[4096];
    snprintf(args, sizeof args, "-m %s --prompts %s --samples 2 --len 16 --kernels invariant --backend cpu --out none "
             "--json -q %s", model, prompts, extra);
    const int rc = rc_test_run_cli(".", args, out, nout, err, sizeof err);
    ck_assert_msg(rc == 0, "ratiocheck %s: exit %d: %s", args, rc, err);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "%s", je.text);
    const json_t *std = json_object_get(json_array_get(json_object_get(j, "lens"), 0), "std");
    ck_assert(json_is_number(std));
    const double v = json_number_value(std);
    json_decref(j);
    return v;
}

START_TEST(test_cli_sides)
{
    char dir[256], prompts[512];
    ck_assert(rc_test_mkdtemp(dir, sizeof dir, "/tmp/rc_mla_") != NULL);
    snprintf(prompts, sizeof prompts, "%s/p.ids", dir);
    FILE *f = fopen(prompts, "w");
    ck_assert(f != NULL);
    fputs("5 9 14 3 77 21 8 40\n12 33 4 90 61 7 2 18\n", f);
    ck_assert(fclose(f) == 0);
    char *out = malloc(1 << 20);
    ck_assert(out != NULL);
    const char *m = "data/fixtures/deepseek_v3_mla";
    const double base = cli_std(m, prompts, "", out, 1 << 20);
    const double expanded = cli_std(m, prompts, "--sampler mla=expanded", out, 1 << 20);
    ck_assert_ptr_nonnull(strstr(out, "mla=expanded"));
    const double absorbed = cli_std(m, prompts, "--trainer mla=absorbed", out, 1 << 20);
    ck_assert_ptr_nonnull(strstr(out, "mla=absorbed"));
    const double other = cli_std("data/fixtures/llama_gqa", prompts, "--sampler mla=absorbed", out, 1 << 20);
    printf("cli ratio std, invariant kernels: default sides %.3e, both expanded %.3e, both absorbed %.3e; llama_gqa "
           "with sampler mla=absorbed %.3e\n", base, expanded, absorbed, other);
    ck_assert(base > 0.0);
    ck_assert(expanded == 0.0 && absorbed == 0.0 && other == 0.0);
    free(out);
    rc_test_rm_rf(dir);
}
END_TEST

static Suite *mla_suite(void)
{
    Suite *s = suite_create("mla");
    TCase *tc = tcase_create("mla");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_absorbed_vs_torch, 0, N_MODELS);
    tcase_add_test(tc, test_absorbed_ops_vs_torch);
    tcase_add_loop_test(tc, test_interleaved_rope_vs_torch, 0, 2);
    tcase_add_test(tc, test_cli_sides);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return rc_test_run(mla_suite()); }
