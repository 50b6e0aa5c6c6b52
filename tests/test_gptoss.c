/* The gpt-oss family's rules against transformers' own code
 * (tools/fixtures/make_gptoss_fixtures.py writes data/fixtures/gptoss_ops and
 * data/fixtures/gptoss_mxfp4; the whole-model fixture gptoss_sinks is a row of
 * tests/fixtures.h, checked by test_forward with the others):
 *  - bf16 op cases bit for bit: the attention softmax with sinks
 *    (rco_softmax_sink, mode 0, against GptOss's eager_attention_forward), the
 *    router (top-k of the logits, softmax over the k: GptOssTopKRouter) and the
 *    clamped SwiGLU (rco_swiglu_clamp1: GptOssExperts._apply_gate);
 *  - the MXFP4 folder (experts as *_blocks / *_scales) reads bitwise as its
 *    copy with transformers' dequantized experts (kept as the 64-bit FNV-1a
 *    hash of each tensor, gptoss_mxfp4/deq, written by
 *    tools/fixtures/deq_hashes.py; checked with tests/testutil_deq.h), bf16
 *    and fp32 runs on it and on the bf16 folder rebuilt from our
 *    dequantization give bitwise equal log-probs, and the fp32 run matches the
 *    fp32 log-probs of the model transformers builds from the MXFP4 folder
 *    (<= 1e-5);
 *  - a hostile scale in the MXFP4 folder (255: e8m0 NaN; 254: a value
 *    overflowing to Inf) is refused with RC_ERR_FORMAT naming the file. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "model.h"
#include "ops_inline.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"
#include "testutil_deq.h"

static rc_safetensors *open_ops(void)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/gptoss_ops/gptoss_ops_bf16.safetensors");
    rc_safetensors *st;
    ck_assert_msg(rc_st_open_file(p, &st) == RC_OK, "%s", rc_last_error());
    return st;
}

/* element i of an F32 / BF16 (widened exactly) / I32 tensor (the mapped data need not be aligned) */
static float f32_at(const rc_st_tensor *t, int64_t i)
{
    ck_assert_msg(t->dtype == RC_F32 || t->dtype == RC_BF16, "%s: %s, not F32 / BF16", t->name, t->dtype_name);
    if (t->dtype == RC_BF16) {
        uint16_t h;
        memcpy(&h, t->data + 2 * i, 2);
        return rc_bf16_to_f32(h);
    }
    float v;
    memcpy(&v, t->data + 4 * i, 4);
    return v;
}
static int32_t i32_at(const rc_st_tensor *t, int64_t i)
{
    int32_t v;
    memcpy(&v, t->data + 4 * i, 4);
    return v;
}

static const rc_st_tensor *need(const rc_safetensors *st, const char *name)
{
    const rc_st_tensor *t = rc_st_find(st, name);
    ck_assert_msg(t != NULL, "%s missing", name);
    return t;
}

START_TEST(test_sink_softmax_bf16)
{
    rc_safetensors *st = open_ops();
    const rc_st_tensor *sc = need(st, "sink.scores"), *sk = need(st, "sink.sinks"), *pr = need(st, "sink.probs");
    const rc_st_tensor *meta = need(st, "sink.meta");
    const int64_t nh = i32_at(meta, 0), T = i32_at(meta, 1), win = i32_at(meta, 2);
    float row[256], ms[RC_SOFTMAX_MAX_CHUNKS], ls[RC_SOFTMAX_MAX_CHUNKS];
    ck_assert(T <= 256);
    int64_t n = 0, diff = 0, zero_masked = 0, masked = 0;
    double mass_min = 1.0;
    for (int64_t h = 0; h < nh; h++)
        for (int64_t i = 0; i < T; i++) {
            const int64_t lo = rco_attn_lo(i, win), nk = i - lo + 1;
            for (int64_t j = 0; j < nk; j++)
                row[j] = f32_at(sc, (h * T + i) * T + lo + j);
            rco_softmax_sink(row, nk, 0, f32_at(sk, h), RC_BF16, RC_BF16, ms, ls);
            double mass = 0.0;
            for (int64_t j = 0; j < nk; j++) {
                const float want = f32_at(pr, (h * T + i) * T + lo + j);
                diff += rc_f32_bits(row[j]) != rc_f32_bits(want);
                mass += want;
                n++;
            }
            mass_min = mass < mass_min ? mass : mass_min;
            for (int64_t j = 0; j < T; j++) /* the keys the kernel does not visit: exactly 0 in HF */
                if (j < lo || j > i) {
                    masked++;
                    zero_masked += f32_at(pr, (h * T + i) * T + j) == 0.0f;
                }
        }
    printf("sink softmax (bf16): %lld of %lld probabilities differ from eager_attention_forward's; the smallest "
           "row mass %.4g (the sink's share is the rest)\n", (long long)diff, (long long)n, mass_min);
    ck_assert_int_eq(diff, 0);
    ck_assert_int_eq(zero_masked, masked);
    ck_assert(mass_min < 0.5); /* a sink that takes most of a row's mass is among the cases */
    rc_st_close(st);
}
END_TEST

START_TEST(test_router_bf16)
{
    rc_safetensors *st = open_ops();
    int64_t all_ties = 0;
    const char *cases[] = {"router_e8k2",        "router_e32k4",       "router_e6k3_ties",
                           "router_e128k4_ties", "router_e256k4_ties", "router_e128k2_ties"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char nb[128];
        snprintf(nb, sizeof nb, "%s.logits", cases[c]);
        const rc_st_tensor *lg = need(st, nb);
        snprintf(nb, sizeof nb, "%s.idx", cases[c]);
        const rc_st_tensor *ix = need(st, nb);
        snprintf(nb, sizeof nb, "%s.w", cases[c]);
        const rc_st_tensor *w = need(st, nb);
        const int64_t M = lg->shape[0], E = lg->shape[1], k = ix->shape[1];
        float row[256], p[512], sel[16], wt[16];
        ck_assert(E <= 256 && k <= 16);
        int64_t dsel = 0, dw = 0, ties = 0;
        for (int64_t r = 0; r < M; r++) {
            for (int64_t e = 0; e < E; e++)
                row[e] = f32_at(lg, r * E + e);
            rco_moe_route_row(row, E, k, RCO_MOE_TOPK_SOFTMAX, RC_BF16, p, sel, wt);
            for (int64_t j = 0; j < k; j++) {
                dsel += (int32_t)sel[j] != i32_at(ix, r * k + j);
                dw += rc_f32_bits(wt[j]) != rc_f32_bits(f32_at(w, r * k + j));
            }
            for (int64_t e = 0; e < E; e++) /* a logit equal to the k-th one outside the chosen */
                if (e != (int64_t)sel[0] && row[e] == row[(int64_t)sel[k - 1]]) {
                    bool chosen = false;
                    for (int64_t j = 0; j < k; j++)
                        chosen = chosen || (int64_t)sel[j] == e;
                    ties += !chosen;
                }
        }
        printf("router %s (bf16, %lld rows): %lld experts and %lld weights differ from GptOssTopKRouter's; %lld "
               "logits tie the k-th outside the top-k\n", cases[c], (long long)M, (long long)dsel, (long long)dw,
               (long long)ties);
        ck_assert_int_eq(dsel, 0);
        ck_assert_int_eq(dw, 0);
        all_ties += ties;
    }
    ck_assert_int_gt(all_ties, 0); /* the set at a tie on the k-th logit is torch.topk's */
    rc_st_close(st);
}
END_TEST

START_TEST(test_swiglu_clamp_bf16)
{
    rc_safetensors *st = open_ops();
    const char *cases[] = {"swiglu_l7", "swiglu_l1p5", "swiglu_l0p3"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char nb[128];
        snprintf(nb, sizeof nb, "%s.gate_up", cases[c]);
        const rc_st_tensor *gu = need(st, nb);
        snprintf(nb, sizeof nb, "%s.out", cases[c]);
        const rc_st_tensor *out = need(st, nb);
        snprintf(nb, sizeof nb, "%s.meta", cases[c]);
        const rc_st_tensor *meta = need(st, nb);
        double lim, alpha;
        memcpy(&lim, meta->data, 8);
        memcpy(&alpha, meta->data + 8, 8);
        const int64_t M = gu->shape[0], I = gu->shape[1] / 2;
        const float l = rc_round_to((float)lim, RC_BF16);
        int64_t diff = 0, clamped = 0;
        for (int64_t r = 0; r < M; r++)
            for (int64_t i = 0; i < I; i++) {
                const float g = f32_at(gu, r * 2 * I + 2 * i), u = f32_at(gu, r * 2 * I + 2 * i + 1);
                const float y = rco_swiglu_clamp1(g, u, (float)alpha, l, RC_BF16);
                diff += rc_f32_bits(y) != rc_f32_bits(f32_at(out, r * I + i));
                clamped += g > l || fabsf(u) > l;
            }
        printf("clamped SwiGLU %s (bf16, limit %g): %lld of %lld outputs differ from _apply_gate's; %lld pairs "
               "clamped\n", cases[c], lim, (long long)diff, (long long)(M * I), (long long)clamped);
        ck_assert_int_eq(diff, 0);
        ck_assert_int_gt(clamped, 0);
    }
    rc_st_close(st);
}
END_TEST

static char g_tmp[1024];
static void tmp_setup(void) { rc_test_fresh_dir(g_tmp, sizeof g_tmp, "/tmp"); }
static void tmp_teardown(void) { rc_test_rm_rf(g_tmp); }

/* every tensor of the MXFP4 folder hashes as transformers' dequantized copy's
 * (gptoss_mxfp4/deq/tensors.txt), read as bf16, and reads as fp32 as its
 * widening */
START_TEST(test_mxfp4_folder_weights)
{
    char pq[4096], pr[4096];
    rc_test_source_path(pq, sizeof pq, "data/fixtures/gptoss_mxfp4");
    rc_test_source_path(pr, sizeof pr, "data/fixtures/gptoss_mxfp4/deq");
    int64_t nt, nq;
    const int64_t nvals = rc_test_deq_folder(pq, "mxfp4", pr, g_tmp, &nt, &nq);
    printf("mxfp4 folder: %lld tensors (%lld MXFP4 expert tensors), %lld values hash as the dequantized copy's\n",
           (long long)nt, (long long)nq, (long long)nvals);
    ck_assert_int_eq(nq, 2 * 3); /* gate_up and down of each of the 3 layers */
}
END_TEST

/* runs on the MXFP4 folder: fp32 against transformers' dequantized model,
 * bf16 and fp32 bitwise its bf16 copy (rebuilt from our dequantization once
 * every tensor hashes as transformers') */
START_TEST(test_mxfp4_folder_run)
{
    char pq[4096], pb[4096], pr[4096];
    rc_test_source_path(pq, sizeof pq, "data/fixtures/gptoss_mxfp4");
    rc_test_source_path(pr, sizeof pr, "data/fixtures/gptoss_mxfp4/deq");
    int64_t nt;
    rc_test_deq_folder(pq, "mxfp4", pr, g_tmp, &nt, NULL);
    snprintf(pb, sizeof pb, "%s", g_tmp);
    rc_test_source_path(pr, sizeof pr, "data/fixtures/gptoss_mxfp4/hf_logprobs.safetensors");
    rc_safetensors *ref;
    ck_assert_msg(rc_st_open_file(pr, &ref) == RC_OK, "%s", rc_last_error());
    const rc_st_tensor *tk = need(ref, "tokens"), *ln = need(ref, "lengths"), *lp = need(ref, "forward_logprobs_f32");
    const int64_t B = tk->shape[0], Lmax = tk->shape[1], V = lp->shape[2];
    int64_t lens[16], R = 0;
    ck_assert(B <= 16);
    for (int64_t b = 0; b < B; b++)
        R += lens[b] = i32_at(ln, b);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)R);
    for (int64_t b = 0, r = 0; b < B; b++)
        for (int64_t i = 0; i < lens[b]; i++)
            tok[r++] = i32_at(tk, b * Lmax + i);
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &be) == RC_OK);
    rc_model *m[2];
    ck_assert_msg(rc_model_load(pq, &m[0]) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(rc_model_load(pb, &m[1]) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(m[0]->cfg.vocab, V);
    for (int d = 0; d < 2; d++) {
        rc_numerics num = rc_numerics_fp32();
        num.dt = d ? RC_F32 : RC_BF16;
        float *out[2];
        for (int k = 0; k < 2; k++) {
            rc_engine *e;
            ck_assert_msg(rc_engine_create(m[k], be, &num, B, Lmax, R, &e) == RC_OK, "%s", rc_last_error());
            out[k] = malloc(sizeof(float) * (size_t)(R * V));
            ck_assert_msg(rc_full_forward(e, tok, lens, B, out[k]) == RC_OK, "%s", rc_last_error());
            rc_engine_free(e);
        }
        int64_t diff = 0;
        for (int64_t i = 0; i < R * V; i++)
            diff += rc_f32_bits(out[0][i]) != rc_f32_bits(out[1][i]);
        ck_assert_int_eq(diff, 0);
        if (d) { /* fp32: against HF's model from the MXFP4 folder */
            double mx = 0.0;
            for (int64_t b = 0, r = 0; b < B; b++)
                for (int64_t i = 0; i < lens[b]; i++, r++)
                    for (int64_t v = 0; v < V; v++)
                        mx = fmax(mx, fabs((double)out[0][r * V + v] - f32_at(lp, (b * Lmax + i) * V + v)));
            printf("mxfp4 folder run (fp32): max|dlogp| vs transformers' dequantized model %.3g (%lld positions x "
                   "%lld vocab); bf16 and fp32 runs bitwise the bf16 copy's\n", mx, (long long)R, (long long)V);
            ck_assert(mx <= 1e-5);
        }
        free(out[0]);
        free(out[1]);
    }
    rc_model_free(m[0]);
    rc_model_free(m[1]);
    rc_backend_destroy(be);
    free(tok);
    rc_st_close(ref);
}
END_TEST

/* the MXFP4 folder copied into g_tmp with byte off of model.safetensors set to v */
static void hostile_copy(int64_t off, uint8_t v)
{
    const char *files[] = {"model.safetensors", "config.json"};
    for (int f = 0; f < 2; f++) {
        char p[4096], q[4096];
        rc_test_source_path(p, sizeof p, "data/fixtures/gptoss_mxfp4/%s", files[f]);
        char *b;
        size_t n;
        ck_assert(rc_read_file(p, &b, &n, 1u << 26) == RC_OK);
        if (f == 0)
            b[off] = (char)v;
        snprintf(q, sizeof q, "%s/%s", g_tmp, files[f]);
        FILE *o = fopen(q, "wb");
        ck_assert(o != NULL && fwrite(b, 1, n, o) == n);
        fclose(o);
        free(b);
    }
}

START_TEST(test_mxfp4_hostile_scale)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/gptoss_mxfp4/model.safetensors");
    rc_safetensors *st;
    ck_assert(rc_st_open_file(p, &st) == RC_OK);
    const rc_st_tensor *t = need(st, "model.layers.1.mlp.experts.down_proj_scales");
    const int64_t off = (int64_t)(t->data - st->files[0].map) + 5;
    rc_st_close(st);
    const uint8_t bad[] = {255, 254};
    for (int i = 0; i < 2; i++) {
        hostile_copy(off, bad[i]);
        rc_model *m = NULL;
        const rc_status s = rc_model_load(g_tmp, &m);
        ck_assert_msg(s == RC_ERR_FORMAT, "scale %d: status %d (%s)", bad[i], (int)s, rc_last_error());
        ck_assert_msg(strstr(rc_last_error(), g_tmp) != NULL, "the error does not name the file: %s",
                      rc_last_error());
        ck_assert(m == NULL);
    }
    hostile_copy(off, 127); /* a finite scale loads */
    rc_model *m = NULL;
    ck_assert_msg(rc_model_load(g_tmp, &m) == RC_OK, "%s", rc_last_error());
    rc_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gptoss");
    TCase *tc = tcase_create("gptoss");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, test_sink_softmax_bf16);
    tcase_add_test(tc, test_router_bf16);
    tcase_add_test(tc, test_swiglu_clamp_bf16);
    tcase_add_test(tc, test_mxfp4_folder_weights);
    tcase_add_test(tc, test_mxfp4_folder_run);
    tcase_add_test(tc, test_mxfp4_hostile_scale);
    suite_add_tcase(s, tc);
    return rc_test_run(s);
}
