/* The routing record and R3's replay against PyTorch
 * (data/fixtures/routing/, tools/fixtures/make_routing_fixtures.py): the replayed
 * router's weights (rco_moe_route_forced_row: the trainer's logits, the
 * sampler's experts) as miles' replayed router computes them, and the
 * routing statistics (rc_routing_compute) from torch.topk's experts of two
 * sides, as torch counts them. */
#include <check.h>
#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors.h"
#include "backend.h"
#include "moe.h"
#include "results.h"
#include "rollout.h"
#include "routing.h"
#include "side.h"

#include "testutil.h"

static const char *const k_cases[] = {"e7k3_norm", "e60k4", "e128k8_norm_fp32", "e16k2_fp32", "e8k1"};
#define N_CASES (int)(sizeof k_cases / sizeof k_cases[0])

static rc_safetensors *open_cases(void)
{
    char p[4096];
    rc_safetensors *st;
    rc_test_source_path(p, sizeof p, "data/fixtures/routing/routing_ops.safetensors");
    ck_assert_msg(rc_st_open_file(p, &st) == RC_OK, "%s", rc_last_error());
    return st;
}

static const rc_st_tensor *find(rc_safetensors *st, int c, const char *what, char *name, size_t n, int64_t *numel)
{
    snprintf(name, n, "%s.%s", k_cases[c], what);
    const rc_st_tensor *t = rc_st_find(st, name);
    ck_assert_msg(t != NULL, "%s missing", name);
    ck_assert(rc_numel(t->shape, t->ndim, numel));
    return t;
}

static float *get(rc_safetensors *st, int c, const char *what, int64_t *n)
{
    char name[128];
    snprintf(name, sizeof name, "%s.%s", k_cases[c], what);
    return rc_test_st_f32(st, name, n);
}

static int32_t *get_i32(rc_safetensors *st, int c, const char *what, int64_t *n)
{
    char name[128];
    const rc_st_tensor *t = find(st, c, what, name, sizeof name, n);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n + 1));
    ck_assert_msg(rc_st_read_i32(st, name, t->ndim, t->shape, v) == RC_OK, "%s", rc_last_error());
    return v;
}

static double *get_f64(rc_safetensors *st, int c, const char *what, int64_t *n)
{
    char name[128];
    const rc_st_tensor *t = find(st, c, what, name, sizeof name, n);
    double *v = malloc(sizeof(double) * (size_t)(*n + 1));
    ck_assert_msg(rc_st_read_f64(st, name, t->ndim, t->shape, v) == RC_OK, "%s", rc_last_error());
    return v;
}

/* R3: the trainer's logits, the sampler's experts; bf16 weights bit for bit; fp32 ones (router=fp32)
 * are not rounded after the softmax, so they carry its fp32 differences from PyTorch's (its vectorised
 * exp and its blocked sums over the E experts and the k weights against expf and a sequential sum,
 * docs/numerics.md; tests/test_moe.c counts the same for Mixtral's fp32 weights): held to a relative
 * 1e-6, a few fp32 ulps, the largest printed */
START_TEST(test_replay_weights_vs_torch)
{
    rc_safetensors *st = open_cases();
    int64_t n;
    int32_t *meta = get_i32(st, _i, "meta", &n);
    const int64_t E = meta[0], k = meta[1], T = meta[3];
    const bool norm = meta[2] != 0, fp32 = meta[5] != 0;
    float *lt = get(st, _i, "logits_trainer", &n);
    ck_assert_int_eq(n, T * E);
    int32_t *idx = get_i32(st, _i, "experts_sampler", &n);
    float *want = get(st, _i, "replay_weights", &n);
    float sel[16], w[16], p[256];
    ck_assert(k <= 16 && E <= 256);
    int64_t max_ulp = 0;
    for (int64_t t = 0; t < T; t++) {
        for (int64_t j = 0; j < k; j++)
            sel[j] = (float)idx[t * k + j];
        rco_moe_route_forced_row(lt + t * E, E, k, norm, fp32 ? RC_F32 : RC_BF16, p, sel, w);
        for (int64_t j = 0; j < k; j++) {
            const int64_t u = llabs((long long)rc_f32_bits(w[j]) - (long long)rc_f32_bits(want[t * k + j]));
            max_ulp = u > max_ulp ? u : max_ulp;
            const double rel = fabs((double)w[j] - (double)want[t * k + j]) / fabs((double)want[t * k + j]);
            ck_assert_msg(fp32 ? rel <= 1e-6 : u == 0, "%s row %lld slot %lld: %.9g, torch %.9g", k_cases[_i],
                          (long long)t, (long long)j, (double)w[j], (double)want[t * k + j]);
        }
    }
    printf("replay weights %s: %lld rows, max %lld fp32 ulp from torch (%s)\n", k_cases[_i], (long long)T,
           (long long)max_ulp, fp32 ? "fp32 weights" : "bf16 weights, bitwise");
    free(meta);
    free(lt);
    free(idx);
    free(want);
    rc_st_close(st);
}
END_TEST

/* the statistics from torch.topk's experts of both sides, rows taken as [tokens, layers] */
START_TEST(test_routing_stats_vs_torch)
{
    rc_safetensors *st = open_cases();
    int64_t n;
    int32_t *meta = get_i32(st, _i, "meta", &n);
    const int64_t E = meta[0], k = meta[1], T = meta[3], Lm = meta[4], G = T / Lm;
    int32_t *a = get_i32(st, _i, "experts_sampler", &n), *b = get_i32(st, _i, "experts_trainer", &n);
    float *lr = get(st, _i, "log_ratio", &n);
    ck_assert_int_eq(n, G);
    rc_routing *r;
    ck_assert(rc_routing_create(1, G, Lm, k, E, &r) == RC_OK);
    for (int64_t m = 0; m < Lm; m++)
        r->layer[m] = (int32_t)(10 + m); /* decoder layers 10, 11, ... */
    for (int64_t i = 0; i < T * k; i++) {
        r->experts[0][i] = (int16_t)a[i];
        r->experts[1][i] = (int16_t)b[i];
        r->weights[0][i] = r->weights[1][i] = 0.0f;
    }
    float *gen = calloc((size_t)G, sizeof *gen); /* log r = fwd - 0 */
    rc_routing_compute(r, gen, lr, G);
    int32_t *flips = get_i32(st, _i, "layer_flips", &n), *none = get_i32(st, _i, "layer_no_common", &n);
    int32_t *first = get_i32(st, _i, "layer_first", &n);
    double *ts = get_f64(st, _i, "stats", &n);
    int64_t min_first = -1, max_none = 0;
    for (int64_t m = 0; m < Lm; m++) {
        ck_assert_int_eq(r->layer_flips[m], flips[m]);
        ck_assert_int_eq(r->layer_miles[m], none[m]);
        ck_assert_int_eq(r->layer_first[m], first[m]);
        if (first[m] > 0 && min_first < 0)
            min_first = 10 + m;
        max_none = none[m] > max_none ? none[m] : max_none;
    }
    const rc_routing_stats *s = &r->st;
    ck_assert_int_eq(s->tokens, G);
    ck_assert_int_eq(s->tokens_flip, (int64_t)ts[0]);
    ck_assert(fabs(s->mean_overlap - ts[1] / (double)(G * Lm * k)) <= 1e-12);
    ck_assert_int_eq(s->first_layer, min_first);
    ck_assert(fabs(s->miles_mismatch - (double)max_none / (double)G) <= 1e-15);
    for (int q = 0; q < 3; q++) {
        const double got = q == 0 ? s->abs_lr_flip : q == 1 ? s->abs_lr_same : s->share_abs_lr_flip;
        ck_assert_msg(isnan(ts[2 + q]) ? isnan(got) : fabs(got - ts[2 + q]) <= 1e-12 * fabs(ts[2 + q]),
                      "%s statistic %d: %.17g, torch %.17g", k_cases[_i], q, got, ts[2 + q]);
    }
    printf("routing stats %s: %lld of %lld tokens flip, first layer %lld, miles %.4g (%s)\n", k_cases[_i],
           (long long)s->tokens_flip, (long long)G, (long long)s->first_layer, s->miles_mismatch,
           rc_routing_verdict(r));
    rc_routing_free(r);
    free(meta);
    free(a);
    free(b);
    free(lr);
    free(gen);
    free(flips);
    free(none);
    free(first);
    free(ts);
    rc_st_close(st);
}
END_TEST

/* router= on both sides, routing= on the trainer only; printed when not the default; sides that differ in
 * them do not share an engine; their numerics */
START_TEST(test_side_keys)
{
    rc_side sm, tr;
    rc_side_defaults(false, &sm);
    rc_side_defaults(true, &tr);
    ck_assert(rc_side_parse("--sampler", "router=fp32", false, &sm) == RC_OK && sm.router_f32);
    ck_assert(rc_side_parse("--trainer", "routing=replay,router=dtype", true, &tr) == RC_OK && tr.route_replay &&
              !tr.router_f32);
    ck_assert(rc_side_parse("--sampler", "routing=replay", false, &sm) == RC_ERR_USAGE);
    ck_assert(strstr(rc_last_error(), "routing belongs to the trainer") != NULL);
    ck_assert(rc_side_parse("--trainer", "routing=yes", true, &tr) == RC_ERR_USAGE);
    ck_assert(strstr(rc_last_error(), "own or replay") != NULL);
    char buf[256];
    rc_side_str(&tr, true, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "routing=replay") && !strstr(buf, "router="), "%s", buf);
    rc_side_str(&sm, false, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "router=fp32") && !strstr(buf, "routing="), "%s", buf);
    rc_side a, b;
    rc_side_defaults(true, &a);
    rc_side_defaults(true, &b);
    ck_assert(rc_side_equal(&a, &b));
    b.route_replay = true;
    ck_assert(!rc_side_equal(&a, &b));
    const rc_numerics base = rc_numerics_fp32(), n = rc_side_numerics(&b, &base, true);
    ck_assert(n.route_replay && !n.router_f32);
}
END_TEST

static rc_model *g_moe;

static void load_moe(void)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/qwen3_moe");
    ck_assert_msg(rc_model_load(p, &g_moe) == RC_OK, "%s", rc_last_error());
}

static void free_moe(void) { rc_model_free(g_moe); }

/* 6 prompts x 2 samples, 20 tokens, on the sides sm / tr, of model m (the prompts' tokens modulo its vocabulary) */
static void run_sides_on(rc_model *m, const char *sampler, const char *trainer, rc_results *r)
{
    static const int32_t toks0[6 * 5] = {5, 17, 99, 140, 3, 250, 8, 61, 33, -1, 12, 200, 7, -1, -1,
                                         77, 78, 79, 80, 81, 4, 90, -1, -1, -1, 150, 160, 170, 180, -1};
    int32_t toks[6 * 5];
    for (int i = 0; i < 6 * 5; i++)
        toks[i] = toks0[i] < 0 ? toks0[i] : (int32_t)(toks0[i] % m->cfg.vocab);
    static const int32_t lens[6] = {5, 4, 3, 5, 2, 4};
    rc_side sm, tr;
    rc_side_defaults(false, &sm);
    rc_side_defaults(true, &tr);
    ck_assert_msg(rc_side_parse("--sampler", sampler, false, &sm) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(rc_side_parse("--trainer", trainer, true, &tr) == RC_OK, "%s", rc_last_error());
    rc_rollout_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_prompts = 6;
    cfg.prompt_max = 5;
    cfg.prompt_tokens = toks;
    cfg.prompt_len = lens;
    cfg.samples = 2;
    cfg.n_lens = 2;
    cfg.lens[0] = 10;
    cfg.lens[1] = 20;
    cfg.seed = 3;
    cfg.sampling.top_p = 1.0;
    cfg.num = rc_numerics_fp32();
    rc_side_apply(&sm, &tr, 1.0, &cfg);
    cfg.batch = 12;
    rc_backend *be = NULL;
    ck_assert(rc_backend_cpu_create(1, sm.kernels, &be) == RC_OK);
    memset(r, 0, sizeof *r);
    ck_assert_msg(rc_run_check(m, be, NULL, &cfg, NULL, NULL, NULL, r) == RC_OK, "%s", rc_last_error());
    rc_backend_destroy(be);
    ck_assert(r->routing != NULL);
    ck_assert_int_eq(r->routing->n_layers, 2); /* qwen3_moe fixture: mlp_only_layers [0] of 3 */
    ck_assert_int_eq(r->routing->layer[0], 1);
}

static void run_sides(const char *sampler, const char *trainer, rc_results *r)
{
    run_sides_on(g_moe, sampler, trainer, r);
}

static double sum_abs_log_ratio(const rc_results *r)
{
    const rc_len_result *L = &r->lens[r->n_lens - 1];
    double s = 0.0;
    for (int64_t q = 0; q < r->n_seq; q++)
        for (int64_t t = 0; t < r->gen_valid[q] && t < L->len; t++)
            s += fabs((double)L->logprob_fwd[q * L->len + t] - (double)r->logprob_gen[q * r->gen_len + t]);
    return s;
}

/* batch-invariant fp32 sides agree bitwise: no flip anywhere, and replaying the sampler's experts (the
 * trainer's own) recomputes the same weights, so the trainer's log-probs are bitwise those without */
START_TEST(test_replay_invariant_sides)
{
    rc_results own, rep;
    run_sides("dtype=fp32,kernels=invariant", "dtype=fp32,kernels=invariant", &own);
    run_sides("dtype=fp32,kernels=invariant", "dtype=fp32,kernels=invariant,routing=replay", &rep);
    ck_assert_int_eq(own.routing->st.tokens, 12 * 20);
    ck_assert_int_eq(own.routing->st.tokens_flip, 0);
    ck_assert_int_eq(rep.routing->st.tokens_flip, 0);
    const int64_t n = own.n_seq * own.gen_len * own.routing->n_layers * own.routing->top_k;
    ck_assert(!memcmp(own.routing->experts[0], own.routing->experts[1], (size_t)n * sizeof(int16_t)));
    ck_assert(!memcmp(own.routing->weights[0], own.routing->weights[1], (size_t)n * sizeof(float)));
    for (int i = 0; i < own.n_lens; i++)
        ck_assert(!memcmp(own.lens[i].logprob_fwd, rep.lens[i].logprob_fwd,
                          (size_t)(own.n_seq * own.lens[i].len) * sizeof(float)));
    rc_results_free(&own);
    rc_results_free(&rep);
}
END_TEST

/* bf16 sampler, fp32 trainer: routes flip; the record under replay is the trainer's own choice (the
 * same rollouts, so as many flips as without it, up to the hidden states replay changes); replay moves
 * the trainer's log-probs of the flipped tokens toward the sampler's */
START_TEST(test_replay_bf16_fp32)
{
    rc_results own, rep;
    run_sides("dtype=bf16", "dtype=fp32", &own);
    run_sides("dtype=bf16", "dtype=fp32,routing=replay", &rep);
    ck_assert(!memcmp(own.gen_tokens, rep.gen_tokens, (size_t)(own.n_seq * own.gen_len) * sizeof(int32_t)));
    ck_assert_int_gt(own.routing->st.tokens_flip, 0);
    ck_assert_int_gt(rep.routing->st.tokens_flip, 0);
    const double a = sum_abs_log_ratio(&own), b = sum_abs_log_ratio(&rep);
    printf("bf16 sampler, fp32 trainer: %lld of %lld tokens flip; sum |log r| %.6g own routing, %.6g replayed\n",
           (long long)own.routing->st.tokens_flip, (long long)own.routing->st.tokens, a, b);
    ck_assert(b < a);
    rc_results_free(&own);
    rc_results_free(&rep);
}
END_TEST

/* /routing written and read back: the same experts and weights, the same statistics recomputed; an
 * expert outside the model's is refused with the file's name */
START_TEST(test_routing_file_round_trip)
{
    rc_results r, back;
    run_sides("dtype=bf16", "dtype=fp32", &r);
    snprintf(r.version, sizeof r.version, "test");
    char dir[PATH_MAX], path[PATH_MAX + 16];
    ck_assert(rc_test_mkdtemp(dir, sizeof dir, "/tmp/rc_test_routing_") != NULL);
    snprintf(path, sizeof path, "%s/r.h5", dir);
    ck_assert_msg(rc_h5_write(&r, path, false) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(rc_h5_read(path, &back) == RC_OK, "%s", rc_last_error());
    const rc_routing *a = r.routing, *b = back.routing;
    ck_assert(b != NULL);
    ck_assert_int_eq(b->n_layers, a->n_layers);
    ck_assert_int_eq(b->top_k, a->top_k);
    const int64_t n = a->n_seq * a->gen_len * a->n_layers * a->top_k;
    for (int side = 0; side < 2; side++) {
        ck_assert(!memcmp(a->experts[side], b->experts[side], (size_t)n * sizeof(int16_t)));
        ck_assert(!memcmp(a->weights[side], b->weights[side], (size_t)n * sizeof(float)));
    }
    ck_assert(!memcmp(a->layer, b->layer, (size_t)a->n_layers * sizeof(int32_t)));
    ck_assert(!memcmp(a->layer_flips, b->layer_flips, (size_t)a->n_layers * sizeof(int64_t)));
    ck_assert(!memcmp(&a->st, &b->st, sizeof a->st));
    rc_results_free(&back);
    /* a hostile expert index */
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert(f >= 0);
    hid_t ds = H5Dopen2(f, "/routing/trainer_experts", H5P_DEFAULT);
    int16_t *e = malloc((size_t)n * sizeof *e);
    ck_assert(ds >= 0 && e && H5Dread(ds, H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, e) >= 0);
    e[5] = 99;
    ck_assert(H5Dwrite(ds, H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, e) >= 0);
    H5Dclose(ds);
    H5Fclose(f);
    free(e);
    ck_assert(rc_h5_read(path, &back) == RC_ERR_FORMAT);
    ck_assert_msg(strstr(rc_last_error(), "trainer_experts holds expert 99") && strstr(rc_last_error(), path), "%s",
                  rc_last_error());
    unlink(path);
    rmdir(dir);
    rc_results_free(&r);
}
END_TEST

/* same bits (NaN where a token is not valid) */
static int64_t n_bits_differ(const float *a, const float *b, int64_t n)
{
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += memcmp(&a[i], &b[i], sizeof *a) != 0;
    return d;
}

/* router=dtype: DeepSeek-V3's gate as vLLM computes it by default (weight and logits in the dtype). Batch-
 * invariant bf16 sides in the same (expanded) MLA form agree bitwise: no flip, every routing weight the same, every
 * ratio 1; the sampler's router=dtype against the trainer's fp32 gate (transformers', the family's default and
 * router=fp32) moves its routing weights and log-probs. GLM-4.5's router, fp32 in every stack, ignores it: the
 * same log-probs and routing bitwise */
START_TEST(test_router_dtype_gate)
{
    char p[4096];
    rc_model *ds, *glm;
    rc_test_source_path(p, sizeof p, "data/fixtures/deepseek_v3_moe");
    ck_assert_msg(rc_model_load(p, &ds) == RC_OK, "%s", rc_last_error());
    rc_test_source_path(p, sizeof p, "data/fixtures/glm4_moe");
    ck_assert_msg(rc_model_load(p, &glm) == RC_OK, "%s", rc_last_error());
    ck_assert(ds->cfg.router_gate_engine_dt && !glm->cfg.router_gate_engine_dt);
    rc_results base, gate, g32, gdt;
    run_sides_on(ds, "dtype=bf16,kernels=invariant,mla=expanded", "dtype=bf16,kernels=invariant", &base);
    run_sides_on(ds, "dtype=bf16,kernels=invariant,mla=expanded,router=dtype",
                 "dtype=bf16,kernels=invariant,router=fp32", &gate);
    const rc_routing *rb = base.routing, *rg = gate.routing;
    const int64_t n = rb->n_seq * rb->gen_len * rb->n_layers * rb->top_k;
    ck_assert_int_eq(rb->st.tokens_flip, 0);
    ck_assert_int_eq(n_bits_differ(rb->weights[0], rb->weights[1], n), 0);
    ck_assert(sum_abs_log_ratio(&base) == 0.0);
    const int64_t w_diff = n_bits_differ(rg->weights[0], rg->weights[1], n);
    const double a = sum_abs_log_ratio(&gate);
    printf("deepseek_v3 sampler router=dtype against the trainer's fp32 gate: %lld of %lld routing weights differ, "
           "%lld of %lld tokens flip in some layer, sum |log r| %.6g (0 with the fp32 gate on both sides)\n",
           (long long)w_diff, (long long)n, (long long)rg->st.tokens_flip, (long long)rg->st.tokens, a);
    ck_assert_int_gt(w_diff, 0);
    ck_assert(a > 0.0);
    run_sides_on(glm, "dtype=bf16", "dtype=bf16", &g32);
    run_sides_on(glm, "dtype=bf16,router=dtype", "dtype=bf16", &gdt);
    const int64_t m = g32.routing->n_seq * g32.routing->gen_len * g32.routing->n_layers * g32.routing->top_k;
    ck_assert_int_eq(n_bits_differ(g32.routing->weights[0], gdt.routing->weights[0], m), 0);
    ck_assert(!memcmp(g32.routing->experts[0], gdt.routing->experts[0], (size_t)m * sizeof(int16_t)));
    const rc_len_result *L0 = &g32.lens[g32.n_lens - 1], *L1 = &gdt.lens[gdt.n_lens - 1];
    ck_assert(!memcmp(L0->logprob_fwd, L1->logprob_fwd, (size_t)(g32.n_seq * L0->len) * sizeof *L0->logprob_fwd));
    ck_assert(!memcmp(g32.logprob_gen, gdt.logprob_gen, (size_t)(g32.n_seq * g32.gen_len) * sizeof *g32.logprob_gen));
    rc_results_free(&base), rc_results_free(&gate), rc_results_free(&g32), rc_results_free(&gdt);
    rc_model_free(ds);
    rc_model_free(glm);
}
END_TEST

/* a dense model refuses router= and routing= */
START_TEST(test_dense_refuses)
{
    char p[4096];
    rc_model *m;
    rc_test_source_path(p, sizeof p, "data/fixtures/neox_parallel");
    ck_assert_msg(rc_model_load(p, &m) == RC_OK, "%s", rc_last_error());
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    rc_numerics num = rc_numerics_fp32();
    num.router_f32 = true;
    rc_engine *e = NULL;
    ck_assert(rc_engine_create(m, be, &num, 1, 8, 8, &e) == RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "mixture-of-experts router") != NULL, "%s", rc_last_error());
    rc_backend_destroy(be);
    rc_model_free(m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("routing");
    TCase *tc = tcase_create("torch");
    tcase_add_loop_test(tc, test_replay_weights_vs_torch, 0, N_CASES);
    tcase_add_loop_test(tc, test_routing_stats_vs_torch, 0, N_CASES);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("run");
    tcase_add_test(tr, test_side_keys);
    tcase_add_test(tr, test_dense_refuses);
    tcase_add_test(tr, test_router_dtype_gate);
    tcase_add_unchecked_fixture(tr, load_moe, free_moe);
    tcase_add_test(tr, test_replay_invariant_sides);
    tcase_add_test(tr, test_replay_bf16_fp32);
    tcase_add_test(tr, test_routing_file_round_trip);
    tcase_set_timeout(tr, 120);
    suite_add_tcase(s, tr);
    return s;
}

int main(void) { return rc_test_run(suite()); }
