/* Multimodal wrapper folders read as their text model (models/registry.c's k_wrappers; docs/models.md
 * "Multimodal wrapper folders"): each folder of data/fixtures written by tools/fixtures/make_q35_fixtures.py
 * (save_pretrained of Qwen3_5MoeForConditionalGeneration, Qwen3_5ForConditionalGeneration and
 * Gemma3ForConditionalGeneration holding a text fixture's weights and a vision tower) gives the text
 * fixture's log-probs bit for bit, full forward and cached greedy decode, and so is within 1e-5 of that
 * fixture's HF fp32 reference (which the script checked HF's wrapper class reproduces bit for bit); inspect
 * names the wrapper and the tensors it ignores, counted from the folder's own safetensors header. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"

static rc_backend *g_be;

static const struct {
    const char *wrapper, *text, *cls;
} k_pairs[] = {
    {"q35_moe_vl", "q35_moe", "Qwen3_5MoeForConditionalGeneration"},
    {"q35_dense_vl", "q35_dense", "Qwen3_5ForConditionalGeneration"},
    {"gemma3_vl", "gemma3_local", "Gemma3ForConditionalGeneration"},
};
#define N_PAIRS ((int)(sizeof k_pairs / sizeof k_pairs[0]))

static rc_model *load(const char *name)
{
    char dir[4096];
    rc_model *m;
    ck_assert_msg(rc_model_load(rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name), &m) == RC_OK, "%s",
                  rc_last_error());
    return m;
}

static rc_engine *engine(rc_model *m, int64_t len)
{
    rc_engine *e;
    rc_numerics num = rc_numerics_fp32();
    ck_assert_msg(rc_engine_create(m, g_be, &num, 1, len, len, &e) == RC_OK, "%s", rc_last_error());
    return e;
}

/* the full forward of every reference sequence and the cached greedy decode of every prompt (HF fp32's tokens)
 * on the wrapper and on the text model: equal bit for bit, and within 1e-5 of HF fp32 */
START_TEST(test_same_logprobs)
{
    rc_model *mw = load(k_pairs[_i].wrapper), *mt = load(k_pairs[_i].text);
    char path[4096];
    rc_safetensors *ref;
    ck_assert(rc_st_open_file(rc_test_source_path(path, sizeof path, "data/fixtures/%s/reference.safetensors",
                                                  k_pairs[_i].text), &ref) == RC_OK);
    const int64_t B = rc_st_find(ref, "tokens")->shape[0], T = rc_st_find(ref, "tokens")->shape[1];
    const int64_t P = rc_st_find(ref, "gen_prompts")->shape[1], N = rc_st_find(ref, "gen_tokens_f32")->shape[1];
    const int64_t V = mt->cfg.vocab;
    ck_assert_int_eq(mw->cfg.vocab, V);
    int32_t *tok = malloc(sizeof(int32_t) * B * T), *len = malloc(sizeof(int32_t) * B);
    int32_t *pr = malloc(sizeof(int32_t) * B * P), *plen = malloc(sizeof(int32_t) * B);
    int32_t *gt = malloc(sizeof(int32_t) * B * N);
    float *fwd = malloc(sizeof(float) * B * T * V), *glp = malloc(sizeof(float) * B * N * V);
    ck_assert(rc_st_read_i32(ref, "tokens", 2, (int64_t[]){B, T}, tok) == RC_OK);
    ck_assert(rc_st_read_i32(ref, "lengths", 1, (int64_t[]){B}, len) == RC_OK);
    ck_assert(rc_st_read_i32(ref, "gen_prompts", 2, (int64_t[]){B, P}, pr) == RC_OK);
    ck_assert(rc_st_read_i32(ref, "gen_prompt_lengths", 1, (int64_t[]){B}, plen) == RC_OK);
    ck_assert(rc_st_read_i32(ref, "gen_tokens_f32", 2, (int64_t[]){B, N}, gt) == RC_OK);
    ck_assert(rc_st_read_f32(ref, "gen_logprobs_f32", 3, (int64_t[]){B, N, V}, glp) == RC_OK);
    rc_test_read_rows(ref, "forward_logprobs_f32", len, B, T, V, false, fwd);
    rc_engine *ew = engine(mw, T + P + N), *et = engine(mt, T + P + N);
    float *lw = malloc(sizeof(float) * T * V), *lt = malloc(sizeof(float) * T * V);
    double d_fwd = 0, d_gen = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t L = len[b];
        ck_assert(rc_full_forward(ew, tok + b * T, &L, 1, lw) == RC_OK);
        ck_assert(rc_full_forward(et, tok + b * T, &L, 1, lt) == RC_OK);
        ck_assert_msg(memcmp(lw, lt, sizeof(float) * L * V) == 0, "%s: full forward of sequence %lld differs",
                      k_pairs[_i].wrapper, (long long)b);
        for (int64_t i = 0; i < L * V; i++)
            d_fwd = fmax(d_fwd, fabs((double)lw[i] - fwd[b * T * V + i]));
        for (int64_t t = 0; t < N; t++) {
            const int64_t start = t == 0 ? 0 : plen[b] + t - 1, n = t == 0 ? plen[b] : 1, row = n - 1, slot = 0;
            const int32_t *in = t == 0 ? pr + b * P : gt + b * N + t - 1;
            ck_assert(rc_engine_step(ew, &slot, &start, &n, 1, in, &row, 1, lw, NULL, NULL) == RC_OK);
            ck_assert(rc_engine_step(et, &slot, &start, &n, 1, in, &row, 1, lt, NULL, NULL) == RC_OK);
            ck_assert_msg(memcmp(lw, lt, sizeof(float) * V) == 0, "%s: cached step %lld of prompt %lld differs",
                          k_pairs[_i].wrapper, (long long)t, (long long)b);
            for (int64_t v = 0; v < V; v++)
                d_gen = fmax(d_gen, fabs((double)lw[v] - glp[(b * N + t) * V + v]));
        }
    }
    printf("%-13s = %-12s bit for bit; full forward %.3e, cached %.3e from HF fp32\n", k_pairs[_i].wrapper,
           k_pairs[_i].text, d_fwd, d_gen);
    ck_assert_msg(d_fwd <= 1e-5 && d_gen <= 1e-5, "%s: %g / %g", k_pairs[_i].wrapper, d_fwd, d_gen);
    free(lw), free(lt), free(tok), free(len), free(pr), free(plen), free(gt), free(fwd), free(glp);
    rc_engine_free(ew);
    rc_engine_free(et);
    rc_st_close(ref);
    rc_model_free(mw);
    rc_model_free(mt);
}
END_TEST

/* inspect: the wrapper's line, with the count of tensors outside the text model from the folder's header */
START_TEST(test_inspect)
{
    rc_model *mw = load(k_pairs[_i].wrapper);
    char path[4096];
    rc_safetensors *st;
    ck_assert(rc_st_open_file(rc_test_source_path(path, sizeof path, "data/fixtures/%s/model.safetensors",
                                                  k_pairs[_i].wrapper), &st) == RC_OK);
    int64_t other = 0;
    for (int64_t i = 0; i < st->ntensors; i++) {
        const char *n = st->tensors[i].name;
        other += strncmp(n, "model.language_model.", 21) != 0 && strncmp(n, "language_model.", 15) != 0 &&
                 strcmp(n, "lm_head.weight") != 0;
    }
    rc_st_close(st);
    ck_assert(other > 0 && mw->n_ignored_tensors == other);
    static char out[16384], err[4096];
    char args[512], want[512];
    snprintf(args, sizeof args, "inspect --model data/fixtures/%s --no-speed", k_pairs[_i].wrapper);
    ck_assert_msg(rc_test_run_cli("", args, out, sizeof out, err, sizeof err) == 0, "%s", err);
    snprintf(want, sizeof want, "wrapper        %s (model_type %s): its text model only, from text_config",
             k_pairs[_i].cls, mw->cfg.wrapper->model_type);
    ck_assert_msg(strstr(out, want), "%s", out);
    snprintf(want, sizeof want, "; %lld other tensors ignored (", (long long)other);
    ck_assert_msg(strstr(out, want), "%s", out);
    rc_model_free(mw);
}
END_TEST

static Suite *wrapper_suite(void)
{
    Suite *s = suite_create("wrapper");
    TCase *tc = tcase_create("wrapper");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_same_logprobs, 0, N_PAIRS);
    tcase_add_loop_test(tc, test_inspect, 0, N_PAIRS);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (rc_backend_cpu_create(2, RC_KERNELS_ENGINE, &g_be) != RC_OK)
        return 1;
    const int r = rc_test_run(wrapper_suite());
    rc_backend_destroy(g_be);
    return r;
}
