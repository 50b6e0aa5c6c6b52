/* Multimodal wrapper folders read as their text model (models/registry.c's k_wrappers; docs/models.md
 * "Multimodal wrapper folders"): each folder of data/fixtures written by tools/fixtures/make_q35_fixtures.py
 * (save_pretrained of Qwen3_5MoeForConditionalGeneration, Qwen3_5ForConditionalGeneration and
 * Gemma3ForConditionalGeneration holding a text fixture's weights and a vision tower) gives the text
 * fixture's log-probs bit for bit, full forward and cached greedy decode, and so is within 1e-5 of that
 * fixture's HF fp32 reference (which the script checked HF's wrapper class reproduces bit for bit); inspect
 * names the wrapper and the tensors it ignores, counted from the folder's own safetensors header; an FP8 copy
 * of each Qwen3.5 folder written here (every matrix of the text model and of the vision tower as F8_E4M3 in
 * 16 x 16 blocks) has inspect count the text model's quantized tensors of the layers read (--layers N) and
 * none of the vision tower's, as the test counts them from the copy's header. */
#include <check.h>
#include <jansson.h>
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

/* dir/config.json: the wrapper's with quantization_config fp8 in 16 x 16 blocks; dir/model.safetensors: its
 * tensors, each matrix (2 or 3 dimensions: expert stacks) but the embeddings, the head, the norms and the
 * convolutions as F8_E4M3 codes (zeros: inspect reads the headers and checks the scales) with an F32
 * weight_scale_inv of ones, [..., ceil(rows / 16), ceil(cols / 16)] */
static void write_fp8_copy(const char *wrapper, const char *dir)
{
    char path[4096], out[4200];
    json_error_t jerr;
    json_t *cfg = json_load_file(rc_test_source_path(path, sizeof path, "data/fixtures/%s/config.json", wrapper), 0,
                                 &jerr);
    ck_assert_msg(cfg != NULL, "%s: %s", path, jerr.text);
    json_object_set_new(cfg, "quantization_config",
                        json_pack("{s:s, s:s, s:[i, i]}", "quant_method", "fp8", "activation_scheme", "dynamic",
                                  "weight_block_size", 16, 16));
    snprintf(out, sizeof out, "%s/config.json", dir);
    ck_assert(json_dump_file(cfg, out, JSON_INDENT(2)) == 0);
    json_decref(cfg);
    rc_safetensors *st;
    ck_assert(rc_st_open_file(rc_test_source_path(path, sizeof path, "data/fixtures/%s/model.safetensors", wrapper),
                              &st) == RC_OK);
    json_t *hdr = json_object();
    int64_t off = 0;
    bool *q = calloc((size_t)st->ntensors, sizeof *q);
    for (int64_t i = 0; i < st->ntensors; i++) {
        const rc_st_tensor *t = &st->tensors[i];
        q[i] = (t->ndim == 2 || t->ndim == 3) && !strstr(t->name, "embed") && !strstr(t->name, "lm_head") &&
               !strstr(t->name, "norm") && !strstr(t->name, "conv");
        json_t *shape = json_array();
        int64_t n = 1;
        for (int d = 0; d < t->ndim; d++) {
            json_array_append_new(shape, json_integer(t->shape[d]));
            n *= t->shape[d];
        }
        const int64_t bytes = q[i] ? n : (int64_t)(t->end - t->begin);
        json_object_set_new(hdr, t->name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", q[i] ? "F8_E4M3" : t->dtype_name,
                                                    "shape", shape, "data_offsets", (json_int_t)off,
                                                    (json_int_t)(off + bytes)));
        off += bytes;
        if (q[i]) {
            json_t *ss = json_array();
            int64_t ns = 1;
            for (int d = 0; d < t->ndim; d++) {
                const int64_t v = d < t->ndim - 2 ? t->shape[d] : (t->shape[d] + 15) / 16;
                json_array_append_new(ss, json_integer(v));
                ns *= v;
            }
            char sname[1024];
            snprintf(sname, sizeof sname, "%s_scale_inv", t->name);
            json_object_set_new(hdr, sname, json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", ss,
                                                       "data_offsets", (json_int_t)off, (json_int_t)(off + 4 * ns)));
            off += 4 * ns;
        }
    }
    char *text = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert(text != NULL);
    size_t hlen = strlen(text);
    const size_t pad = (8 - hlen % 8) % 8;
    snprintf(out, sizeof out, "%s/model.safetensors", dir);
    FILE *f = fopen(out, "wb");
    ck_assert(f != NULL);
    const uint64_t h64 = hlen + pad;
    ck_assert(fwrite(&h64, 8, 1, f) == 1 && fwrite(text, 1, hlen, f) == hlen);
    for (size_t k = 0; k < pad; k++)
        fputc(' ', f);
    /* the data: each tensor at its offsets, the codes zeros, the scales ones */
    unsigned char *data = calloc((size_t)off + 1, 1);
    ck_assert(data != NULL);
    for (int64_t i = 0; i < st->ntensors; i++) {
        const rc_st_tensor *t = &st->tensors[i];
        const json_t *e = json_object_get(hdr, t->name);
        const int64_t b = json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 0));
        if (!q[i]) {
            memcpy(data + b, t->data, (size_t)(t->end - t->begin));
            continue;
        }
        char sname[1024];
        snprintf(sname, sizeof sname, "%s_scale_inv", t->name);
        const json_t *se = json_object_get(hdr, sname);
        const int64_t sb = json_integer_value(json_array_get(json_object_get(se, "data_offsets"), 0)),
                      se_ = json_integer_value(json_array_get(json_object_get(se, "data_offsets"), 1));
        const float one = 1.0f;
        for (int64_t k = sb; k < se_; k += 4)
            memcpy(data + k, &one, 4);
    }
    ck_assert((int64_t)fwrite(data, 1, (size_t)off, f) == off);
    ck_assert(fclose(f) == 0);
    free(data);
    free(text);
    free(q);
    json_decref(hdr);
    rc_st_close(st);
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

/* the FP8 copy of a Qwen3.5 wrapper folder: inspect's quantized tensors, with and without --layers, are the text
 * model's of the layers read, counted here from the copy's own header (rc_st_open_dir: the F8_E4M3 weights with
 * their scales); the vision tower's, quantized too, are not among them */
START_TEST(test_inspect_fp8)
{
    static const char *const k_q35[] = {"q35_dense_vl", "q35_moe_vl"};
    char dir[1024];
    rc_test_fresh_dir(dir, sizeof dir, "/tmp");
    write_fp8_copy(k_q35[_i], dir);
    rc_safetensors *st;
    ck_assert_msg(rc_st_open_dir(dir, &st) == RC_OK, "%s", rc_last_error());
    rc_model *m;
    ck_assert_msg(rc_model_load_headers(dir, &m) == RC_OK, "%s", rc_last_error());
    const int64_t L = m->cfg.n_layers;
    rc_model_free(m);
    ck_assert_int_ge(L, 2);
    const char *text = "model.language_model.";
    int64_t vision = 0;
    for (int64_t i = 0; i < st->ntensors; i++)
        vision += st->tensors[i].quant == RC_ST_Q_FP8_BLOCK && strncmp(st->tensors[i].name, text, strlen(text)) != 0;
    ck_assert_msg(vision > 0, "%s: no quantized tensor outside the text model", k_q35[_i]);
    int64_t prev = 0;
    for (int64_t n = 1; n <= L; n++) {
        int64_t nq = 0, codes = 0, scales = 0;
        for (int64_t i = 0; i < st->ntensors; i++) {
            const rc_st_tensor *t = &st->tensors[i];
            long long l;
            if (t->quant != RC_ST_Q_FP8_BLOCK || strncmp(t->name, text, strlen(text)) != 0 ||
                (sscanf(t->name + strlen(text), "layers.%lld.", &l) == 1 && l >= n))
                continue;
            nq++;
            codes += t->qdim[0] * t->qdim[1] * t->qdim[2];
            scales += 4 * t->qdim[0] * ((t->qdim[1] + 15) / 16) * ((t->qdim[2] + 15) / 16);
        }
        ck_assert_int_gt(nq, prev);
        prev = nq;
        static char out[16384], err[4096];
        char args[1536], want[512];
        snprintf(args, sizeof args, "inspect --no-speed --model '%s'%s", dir, n < L ? " --layers " : "");
        if (n < L)
            snprintf(args + strlen(args), sizeof args - strlen(args), "%lld", (long long)n);
        ck_assert_msg(rc_test_run_cli("", args, out, sizeof out, err, sizeof err) == 0, "%s", err);
        snprintf(want, sizeof want, "%lld quantized tensors: stored %.4g MiB + scales %.4g MiB (the serving engine's), "
                 "dequantized to 2 bytes %.4g MiB", (long long)nq, codes / 1048576.0, scales / 1048576.0,
                 2 * codes / 1048576.0);
        ck_assert_msg(strstr(out, want) != NULL, "%s (%s): %s not in %s", k_q35[_i], args, want, out);
        printf("%-13s fp8 copy, layers %lld of %lld: %s (%lld vision tensors left out)\n", k_q35[_i], (long long)n,
               (long long)L, want, (long long)vision);
    }
    rc_st_close(st);
    rc_test_rm_rf(dir);
}
END_TEST

static Suite *wrapper_suite(void)
{
    Suite *s = suite_create("wrapper");
    TCase *tc = tcase_create("wrapper");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_same_logprobs, 0, N_PAIRS);
    tcase_add_loop_test(tc, test_inspect, 0, N_PAIRS);
    tcase_add_loop_test(tc, test_inspect_fp8, 0, 2);
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
