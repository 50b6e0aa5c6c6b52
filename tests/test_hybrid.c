/* The engine's hybrid linear-attention path (docs/linear-attention-cache.md) on
 * data/fixtures/qnext_hybrid, against HF's references in the fixture
 * (tools/fixtures/make_qnext_fixtures.py): the side settings chunk= and
 * prefix-cache= keep both paths within 1e-5 of HF's fp64 log-probs (the fp64
 * criterion: the exact value both forms approach); state=dtype stores the
 * recurrent state as values of the dtype; a state slot continues in order
 * only; the keys are refused on a model without linear layers; the state
 * cache's size. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "safetensors.h"
#include "side.h"
#include "util.h"

#include "testutil.h"

static rc_backend *g_be;

typedef struct {
    rc_model *m;
    rc_safetensors *ref;
    int64_t B, T, V, P, N;
    int32_t *tokens, *lengths, *gprompt, *gplen, *gtok64;
    double *fwd64, *glp64;
} fixture;

static void load(const char *name, fixture *f)
{
    memset(f, 0, sizeof *f);
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name);
    ck_assert_msg(rc_model_load(dir, &f->m) == RC_OK, "%s", rc_last_error());
    char *rp = rc_path_join(dir, "reference.safetensors");
    ck_assert_msg(rc_st_open_file(rp, &f->ref) == RC_OK, "%s", rc_last_error());
    free(rp);
    f->B = rc_st_find(f->ref, "tokens")->shape[0];
    f->T = rc_st_find(f->ref, "tokens")->shape[1];
    f->P = rc_st_find(f->ref, "gen_prompts")->shape[1];
    f->N = rc_st_find(f->ref, "gen_tokens_f64")->shape[1];
    f->V = f->m->cfg.vocab;
    const int64_t B = f->B, T = f->T, V = f->V, P = f->P, N = f->N;
    f->tokens = malloc(sizeof(int32_t) * B * T);
    f->lengths = malloc(sizeof(int32_t) * B);
    f->gprompt = malloc(sizeof(int32_t) * B * P);
    f->gplen = malloc(sizeof(int32_t) * B);
    f->gtok64 = malloc(sizeof(int32_t) * B * N);
    f->fwd64 = malloc(sizeof(double) * B * T * V);
    f->glp64 = malloc(sizeof(double) * B * N * V);
#define RD(fn, nm, nd, p, ...) \
    ck_assert_msg(fn(f->ref, nm, nd, (int64_t[]){__VA_ARGS__}, p) == RC_OK, "%s", rc_last_error())
    RD(rc_st_read_i32, "tokens", 2, f->tokens, B, T);
    RD(rc_st_read_i32, "lengths", 1, f->lengths, B);
    RD(rc_st_read_i32, "gen_prompts", 2, f->gprompt, B, P);
    RD(rc_st_read_i32, "gen_prompt_lengths", 1, f->gplen, B);
    RD(rc_st_read_i32, "gen_tokens_f64", 2, f->gtok64, B, N);
    rc_test_read_rows(f->ref, "forward_logprobs_f64", f->lengths, B, T, V, true, f->fwd64);
    RD(rc_st_read_f64, "gen_logprobs_f64", 3, f->glp64, B, N, V);
#undef RD
}

static void unload(fixture *f)
{
    rc_model_free(f->m);
    rc_st_close(f->ref);
    free(f->tokens);
    free(f->lengths);
    free(f->gprompt);
    free(f->gplen);
    free(f->gtok64);
    free(f->fwd64);
    free(f->glp64);
}

static rc_engine *engine(const fixture *f, const rc_numerics *num, int64_t slots, int64_t rows)
{
    rc_engine *e;
    ck_assert_msg(rc_engine_create(f->m, g_be, num, slots, f->T + f->P + f->N, rows, &e) == RC_OK, "%s",
                  rc_last_error());
    return e;
}

/* the full forward of every sequence alone: max |log p - HF fp64| */
static double forward_vs_fp64(const fixture *f, const rc_numerics *num)
{
    rc_engine *e = engine(f, num, 1, f->T);
    float *lp = malloc(sizeof(float) * f->T * f->V);
    double d = 0;
    for (int64_t b = 0; b < f->B; b++) {
        const int64_t L = f->lengths[b];
        ck_assert_msg(rc_full_forward(e, f->tokens + b * f->T, &L, 1, lp) == RC_OK, "%s", rc_last_error());
        for (int64_t i = 0; i < L * f->V; i++)
            d = fmax(d, fabs((double)lp[i] - f->fwd64[b * f->T * f->V + i]));
    }
    free(lp);
    rc_engine_free(e);
    return d;
}

/* the cached generation of HF's fp64 greedy tokens (prompt in one call, then one token per call): max
 * |log p - HF fp64| */
static double cached_vs_fp64(const fixture *f, const rc_numerics *num)
{
    rc_engine *e = engine(f, num, 1, f->P);
    float *lp = malloc(sizeof(float) * f->V);
    double d = 0;
    for (int64_t b = 0; b < f->B; b++) {
        const int64_t P = f->gplen[b], slot = 0;
        for (int64_t t = 0; t < f->N; t++) {
            const int64_t start = t == 0 ? 0 : P + t - 1, n = t == 0 ? P : 1, row = n - 1;
            const int32_t *tok = t == 0 ? f->gprompt + b * f->P : f->gtok64 + b * f->N + t - 1;
            ck_assert_msg(rc_engine_step(e, &slot, &start, &n, 1, tok, &row, 1, lp, NULL, NULL) == RC_OK, "%s",
                          rc_last_error());
            for (int64_t v = 0; v < f->V; v++)
                d = fmax(d, fabs((double)lp[v] - f->glp64[(b * f->N + t) * f->V + v]));
        }
    }
    free(lp);
    rc_engine_free(e);
    return d;
}

/* chunk=N on either path and the prefix cache: within 1e-5 of HF's fp64 (the fp64 criterion) */
START_TEST(test_sides_vs_fp64)
{
    fixture f;
    load("qnext_hybrid", &f);
    static const int64_t chunks[] = {16, 64, 128, 1};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        rc_numerics num = rc_numerics_fp32();
        num.gdn_chunk = chunks[i];
        const double df = forward_vs_fp64(&f, &num), dc = cached_vs_fp64(&f, &num);
        printf("qnext_hybrid chunk=%-4lld full forward %.3e, cached %.3e from HF fp64\n", (long long)chunks[i], df,
               dc);
        ck_assert_msg(df <= 1e-5 && dc <= 1e-5, "chunk %lld: %g / %g", (long long)chunks[i], df, dc);
    }
    rc_numerics num = rc_numerics_fp32();
    num.prefix_cache = true;
    const double dp = cached_vs_fp64(&f, &num);
    printf("qnext_hybrid prefix-cache=on cached %.3e from HF fp64\n", dp);
    ck_assert_msg(dp <= 1e-5, "prefix cache: %g", dp);
    unload(&f);
}
END_TEST

/* state=dtype: after a bf16 generation every recurrent state value is a bf16 value; with state=fp32 some
 * are not (the state is kept as computed) */
START_TEST(test_state_dtype)
{
    fixture f;
    load("qnext_hybrid", &f);
    for (int dtype_state = 0; dtype_state <= 1; dtype_state++) {
        rc_numerics num = rc_numerics_fp32();
        num.dt = RC_BF16;
        num.state_dtype = dtype_state;
        rc_engine *e = engine(&f, &num, 1, f.P);
        float *lp = malloc(sizeof(float) * f.V);
        const int64_t P = f.gplen[1], slot = 0;
        for (int64_t t = 0; t < 4; t++) {
            const int64_t start = t == 0 ? 0 : P + t - 1, n = t == 0 ? P : 1, row = n - 1;
            const int32_t *tok = t == 0 ? f.gprompt + f.P : f.gtok64 + f.N + t - 1;
            ck_assert_msg(rc_engine_step(e, &slot, &start, &n, 1, tok, &row, 1, lp, NULL, NULL) == RC_OK, "%s",
                          rc_last_error());
        }
        const rc_state_cache *st = &e->st;
        ck_assert(st->kind && st->n_state_layers == f.m->cfg.n_linear && st->state_dt == (dtype_state ? RC_BF16 : RC_F32));
        const int64_t n = st->n_state_layers * st->n_slots * st->gd.hv * st->gd.dk * st->gd.dv;
        int64_t not_bf16 = 0;
        for (int64_t i = 0; i < n; i++)
            not_bf16 += rc_round_to(st->state[i], RC_BF16) != st->state[i];
        ck_assert_msg(dtype_state ? not_bf16 == 0 : not_bf16 > 0, "state=%s: %lld of %lld values not bf16",
                      dtype_state ? "dtype" : "fp32", (long long)not_bf16, (long long)n);
        free(lp);
        rc_engine_free(e);
    }
    unload(&f);
}
END_TEST

/* a state slot continues where it stopped, or restarts at 0; the KV layers and state layers by kind */
START_TEST(test_order_and_kinds)
{
    fixture f;
    load("qnext_hybrid", &f);
    rc_numerics num = rc_numerics_fp32();
    rc_engine *e = engine(&f, &num, 2, 8);
    const rc_config *c = &f.m->cfg;
    int64_t n_attn = 0;
    for (int64_t l = 0; l < c->n_layers; l++) {
        ck_assert(e->st.kind[l] == (c->layer_linear[l] ? RC_CACHE_STATE : RC_CACHE_KV));
        n_attn += !c->layer_linear[l];
    }
    ck_assert(e->kv.n_layers == n_attn && e->st.n_state_layers == c->n_layers - n_attn);
    const int32_t tok[3] = {5, 6, 7};
    int64_t slot = 1, start = 0, n = 3, row = 2;
    ck_assert(rc_engine_step(e, &slot, &start, &n, 1, tok, &row, 0, NULL, NULL, NULL) == RC_OK);
    start = 5, n = 1, row = 0; /* a gap: refused */
    ck_assert(rc_engine_step(e, &slot, &start, &n, 1, tok, &row, 0, NULL, NULL, NULL) == RC_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "linear-attention state"));
    start = 0; /* the failed call left the slot to restart at 0 */
    ck_assert(rc_engine_step(e, &slot, &start, &n, 1, tok, &row, 0, NULL, NULL, NULL) == RC_OK);
    start = 1;
    ck_assert(rc_engine_step(e, &slot, &start, &n, 1, tok, &row, 0, NULL, NULL, NULL) == RC_OK);
    rc_engine_free(e);
    /* the state cache's size: conv [C][K] and recurrent [hv][dk][dv] fp32 per linear layer and slot, and
     * the slots' counters */
    rc_engine_mem mem;
    ck_assert(rc_engine_mem_estimate(f.m, &num, true, RC_KERNELS_ENGINE, 3, 64, 64, &mem) == RC_OK);
    const int64_t C = 2 * c->lin_hk * c->lin_dk + c->lin_hv * c->lin_dv;
    ck_assert_int_eq(mem.state_cache,
                     (c->n_layers - n_attn) * 3 * (C * c->lin_conv_k + c->lin_hv * c->lin_dk * c->lin_dv) * 4 + 3 * 8);
    unload(&f);
}
END_TEST

/* state=, chunk= and prefix-cache= on a model without linear layers: refused by name */
START_TEST(test_refused_without_linear_layers)
{
    char dir[4096];
    rc_model *m;
    ck_assert(rc_model_load(rc_test_source_path(dir, sizeof dir, "data/fixtures/llama_gqa"), &m) == RC_OK);
    for (int k = 0; k < 4; k++) {
        rc_numerics num = rc_numerics_fp32();
        num.state_dtype = k == 0;
        num.gdn_chunk = k == 1 ? 16 : k == 3 ? RC_GDN_CHUNK_DEFAULT : 0;
        num.prefix_cache = k == 2;
        rc_engine *e = NULL;
        const rc_status s = rc_engine_create(m, g_be, &num, 1, 8, 8, &e);
        if (k == 3) { /* chunk=64, the default: nothing set */
            ck_assert(s == RC_OK);
        } else {
            ck_assert(s == RC_ERR_UNSUPPORTED);
            ck_assert_ptr_nonnull(strstr(rc_last_error(), "has none"));
        }
        rc_engine_free(e);
    }
    rc_model_free(m);
}
END_TEST

/* state= and chunk= on both sides, prefix-cache= on the sampler only; printed when not the default; sides
 * that differ in them do not share an engine; their numerics */
START_TEST(test_side_keys)
{
    rc_side sm, tr;
    rc_side_defaults(false, &sm);
    rc_side_defaults(true, &tr);
    ck_assert(!sm.state_dtype && sm.gdn_chunk == RC_GDN_CHUNK_DEFAULT && !sm.prefix_cache);
    ck_assert(rc_side_parse("--sampler", "state=dtype,prefix-cache=on,chunk=16", false, &sm) == RC_OK);
    ck_assert(sm.state_dtype && sm.prefix_cache && sm.gdn_chunk == 16);
    ck_assert(rc_side_parse("--trainer", "chunk=128,state=fp32", true, &tr) == RC_OK && tr.gdn_chunk == 128);
    ck_assert(rc_side_parse("--trainer", "prefix-cache=on", true, &tr) == RC_ERR_USAGE);
    ck_assert(strstr(rc_last_error(), "prefix-cache belongs to the sampler") != NULL);
    ck_assert(rc_side_parse("--sampler", "state=bf16", false, &sm) == RC_ERR_USAGE);
    ck_assert(strstr(rc_last_error(), "fp32 or dtype") != NULL);
    ck_assert(rc_side_parse("--sampler", "chunk=0", false, &sm) == RC_ERR_USAGE);
    char buf[512];
    rc_side_str(&sm, false, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "state=dtype") && strstr(buf, "chunk=16") && strstr(buf, "prefix-cache=on"), "%s", buf);
    rc_side_str(&tr, true, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "chunk=128") && !strstr(buf, "state="), "%s", buf);
    rc_side a, b;
    rc_side_defaults(false, &a);
    rc_side_defaults(false, &b);
    ck_assert(rc_side_equal(&a, &b));
    b.prefix_cache = true;
    ck_assert(!rc_side_equal(&a, &b));
    b = a;
    b.gdn_chunk = 32;
    ck_assert(!rc_side_equal(&a, &b));
    const rc_numerics base = rc_numerics_fp32(), n = rc_side_numerics(&sm, &base, false);
    ck_assert(n.state_dtype && n.prefix_cache && n.gdn_chunk == 16);
}
END_TEST

/* inspect: the linear layers' line and the state cache in the memory line; the CPU-only refusal of the CUDA
 * backend is the engine's (test_cuda) */
START_TEST(test_inspect)
{
    static char out[16384], err[4096];
    const int rc = rc_test_run_cli("", "inspect --model data/fixtures/qnext_hybrid --no-speed", out, sizeof out, err,
                                   sizeof err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    ck_assert_msg(strstr(out, "linear attn    Gated DeltaNet in 2 of 4 layers: 2 key / 4 value heads of 12 / 20, "
                              "conv 4; attention output gate"), "%s", out);
    ck_assert_msg(strstr(out, ", state cache "), "%s", out);
}
END_TEST

/* trace: a linear layer's in_proj_qkvz (qkv) and mixer output (attn) captured at every position, at their
 * widths; no rope there */
START_TEST(test_trace_linear_layer)
{
    static char out[1 << 20], err[8192];
    char dir[] = "/tmp/rc_hybrid_XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    char args[1024], prompts[600];
    snprintf(prompts, sizeof prompts, "%s/p.jsonl", dir);
    FILE *f = fopen(prompts, "w");
    ck_assert(f != NULL);
    fprintf(f, "{\"tokens\": [5, 17, 33, 100, 9, 41, 77, 3, 120, 12]}\n");
    fclose(f);
    snprintf(args, sizeof args, "run --model data/fixtures/qnext_hybrid --prompts %s --samples 1 --len 6 -q "
             "--out %s/r.h5 --sampler dtype=bf16 --trainer dtype=bf16", prompts, dir);
    ck_assert_msg(rc_test_run_cli("", args, out, sizeof out, err, sizeof err) == 0, "%s", err);
    snprintf(args, sizeof args, "trace %s/r.h5 --worst 1 --out none --json", dir);
    ck_assert_msg(rc_test_run_cli("", args, out, sizeof out, err, sizeof err) == 0, "%s", err);
    json_error_t je;
    json_t *root = json_loads(out, 0, &je);
    ck_assert_msg(root != NULL, "%s", je.text);
    const json_t *cells = json_object_get(root, "cells");
    ck_assert(json_is_array(cells));
    int64_t qkv = 0, attn = 0, rope = 0, pos = 0;
    for (size_t i = 0; i < json_array_size(cells); i++) {
        const json_t *c = json_array_get(cells, i);
        const char *op = json_string_value(json_object_get(c, "op"));
        const int64_t layer = json_integer_value(json_object_get(c, "layer"));
        const int64_t count = json_integer_value(json_object_get(c, "count"));
        if (layer == 0 && !strcmp(op, "norm1"))
            pos = count / 64; /* hidden 64 */
        if (layer == 0 && !strcmp(op, "qkv"))
            qkv = count;
        if (layer == 0 && !strcmp(op, "attn"))
            attn = count;
        if (layer == 0 && !strcmp(op, "rope"))
            rope = count;
    }
    ck_assert_int_eq(pos, 10 + 6 - 1); /* the prompt and the generated tokens but the last */
    ck_assert_int_eq(qkv, pos * (2 * 2 * 12 + 2 * 4 * 20));
    ck_assert_int_eq(attn, pos * 4 * 20);
    ck_assert_int_eq(rope, 0);
    json_decref(root);
    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    ck_assert(system(args) == 0);
}
END_TEST

static Suite *hybrid_suite(void)
{
    Suite *s = suite_create("hybrid");
    TCase *tc = tcase_create("hybrid");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_sides_vs_fp64);
    tcase_add_test(tc, test_state_dtype);
    tcase_add_test(tc, test_order_and_kinds);
    tcase_add_test(tc, test_refused_without_linear_layers);
    tcase_add_test(tc, test_side_keys);
    tcase_add_test(tc, test_inspect);
    tcase_add_test(tc, test_trace_linear_layer);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (rc_backend_cpu_create(2, RC_KERNELS_ENGINE, &g_be) != RC_OK)
        return 1;
    const int r = rc_test_run(hybrid_suite());
    rc_backend_destroy(g_be);
    return r;
}
