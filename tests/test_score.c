/* ratiocheck score: rollouts HF transformers generated and logged
 * (tools/fixtures/make_score_fixtures.py, data/fixtures/score/), re-scored by the CLI,
 * against HF's own full forward of the same tokens; every format on the
 * same rollouts; every alignment check tripped by a file made to trip it. */
#include <check.h>
#include <dirent.h>
#include <hdf5.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "results.h"
#include "testutil.h"
#include "gate_check.h"
#include "align.h"

static char g_out[1 << 16], g_err[1 << 16];
static char g_dir[PATH_MAX];

/* `ratiocheck ARGS` from data/fixtures/score/ (ARGS a printf format, shell-quoted); the exit code */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return rc_test_run_cli("data/fixtures/score", args, g_out, sizeof g_out, g_err, sizeof g_err);
}

static void setup(void)
{
    rc_test_fresh_dir(g_dir, sizeof g_dir, "/tmp");
}

static void teardown(void)
{
    rc_test_rm_rf(g_dir);
}

static json_t *load_json(const char *rel)
{
    char p[PATH_MAX];
    rc_test_source_path(p, sizeof p, "data/fixtures/score/%s", rel);
    json_error_t e;
    json_t *j = json_load_file(p, 0, &e);
    ck_assert_msg(j != NULL, "%s: %s", p, e.text);
    return j;
}

/* the JSONL file's records */
static json_t *load_jsonl(const char *rel)
{
    char p[PATH_MAX];
    rc_test_source_path(p, sizeof p, "data/fixtures/score/%s", rel);
    json_t *arr = json_array();
    json_error_t e;
    FILE *f = fopen(p, "r");
    ck_assert_msg(f != NULL, "%s", p);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, &e);
        ck_assert_msg(o != NULL, "%s: %s", p, e.text);
        json_array_append_new(arr, o);
    }
    free(line);
    fclose(f);
    return arr;
}

/* score FILE in DTYPE into g_dir/NAME.h5, read back */
static void score_into(const char *file, const char *dtype, const char *name, rc_results *r)
{
    int code = run("score -q --backend cpu --rollouts %s --dtype %s --out '%s/%s.h5'", file, dtype, g_dir, name);
    ck_assert_msg(code == 0, "score %s: exit %d: %s", file, code, g_err);
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s.h5", g_dir, name);
    memset(r, 0, sizeof *r);
    ck_assert_msg(rc_h5_read(p, r) == RC_OK, "%s", p);
}

/* The trainer side against HF's forward of the same tokens, and the ratio
 * statistics against HF's own forward-vs-generate ratios. */
typedef struct {
    double max_abs, mean_abs;  /* |score's forward - HF's forward| */
    double mean_abs_f32;       /* mean |score's forward - HF's forward in fp32| */
    double hf_dtype_err;       /* mean |HF forward in the dtype - HF forward in fp32| */
    double hf_dtype_max;       /* max |HF forward in the dtype - HF forward in fp32| */
    double hf_std, hf_mean_abs_lr; /* of HF's own r = exp(forward - logged) */
    double hf32_std;           /* of r = exp(HF's fp32 forward - logged): an exact trainer's */
    int64_t n;
} agreement;

static agreement compare_hf(const rc_results *r, const char *dtype)
{
    char name[64];
    snprintf(name, sizeof name, "hf_refs_%s.json", dtype);
    json_t *refs = load_json(name);
    snprintf(name, sizeof name, "hf_%s.jsonl", dtype);
    json_t *rows = load_jsonl(name);
    json_t *ro = json_object_get(refs, "rollouts");
    ck_assert_int_eq((int64_t)json_array_size(ro), r->n_seq);
    ck_assert_int_eq((int64_t)json_array_size(rows), r->n_seq);
    ck_assert_int_eq(r->n_lens, 1);
    const rc_len_result *L = &r->lens[0];
    agreement a = {0};
    double s = 0, s2 = 0, sd = 0, u = 0, u2 = 0;
    for (int64_t q = 0; q < r->n_seq; q++) {
        json_t *fw = json_object_get(json_array_get(ro, (size_t)q), "forward");
        json_t *f32 = json_object_get(json_array_get(ro, (size_t)q), "forward_fp32");
        json_t *lg = json_object_get(json_array_get(rows, (size_t)q), "logprobs");
        const int64_t n = (int64_t)json_array_size(lg);
        ck_assert_int_eq(r->gen_valid[q], n);
        for (int64_t t = 0; t < n; t++) {
            const double hf = json_real_value(json_array_get(fw, (size_t)t));
            const double logged = json_real_value(json_array_get(lg, (size_t)t));
            /* the sampler's side is the logged value, as a float */
            ck_assert(r->logprob_gen[q * r->gen_len + t] == (float)logged);
            const double d = fabs((double)L->logprob_fwd[q * L->len + t] - hf);
            a.max_abs = d > a.max_abs ? d : a.max_abs;
            a.mean_abs += d;
            const double h32 = json_real_value(json_array_get(f32, (size_t)t));
            a.mean_abs_f32 += fabs((double)L->logprob_fwd[q * L->len + t] - h32);
            a.hf_dtype_err += fabs(hf - h32);
            a.hf_dtype_max = fmax(a.hf_dtype_max, fabs(hf - h32));
            const double lr = hf - (double)(float)logged, rr = exp(lr), r32 = exp(h32 - (double)(float)logged);
            s += rr;
            s2 += rr * rr;
            u += r32;
            u2 += r32 * r32;
            sd += fabs(lr);
            a.n++;
        }
    }
    a.mean_abs /= (double)a.n;
    a.mean_abs_f32 /= (double)a.n;
    a.hf_dtype_err /= (double)a.n;
    a.hf_std = sqrt(fmax(0.0, s2 / (double)a.n - (s / (double)a.n) * (s / (double)a.n)));
    a.hf32_std = sqrt(fmax(0.0, u2 / (double)a.n - (u / (double)a.n) * (u / (double)a.n)));
    a.hf_mean_abs_lr = sd / (double)a.n;
    json_decref(refs);
    json_decref(rows);
    return a;
}

/* fp32: README's emulation gap, fp32 within 1e-5 of HF; the ratio
 * statistics as small as HF's own (forward vs generate, both ~1e-7) */
START_TEST(test_hf_fp32)
{
    rc_results r;
    score_into("hf_fp32.jsonl", "fp32", "fp32", &r);
    agreement a = compare_hf(&r, "fp32");
    fprintf(stderr, "score fp32 vs HF forward: max %.3g mean %.3g over %lld tokens; ratio std %.3g (HF's own %.3g)\n",
            a.max_abs, a.mean_abs, (long long)a.n, r.lens[0].st.std, a.hf_std);
    ck_assert_int_eq(r.lens[0].st.count, a.n);
    ck_assert_msg(a.max_abs <= 1e-5, "max |score - HF| = %g", a.max_abs);
    ck_assert_msg(r.lens[0].st.std < 2e-6 && a.hf_std < 2e-6, "std %g, HF's %g", r.lens[0].st.std, a.hf_std);
    ck_assert(fabs(r.lens[0].st.std - a.hf_std) < 1e-6);
    ck_assert(r.lens[0].st.k3 < 1e-11);
    ck_assert(r.lens[0].st.clipfrac == 0);
    rc_results_free(&r);
}
END_TEST

/* bf16: token by token agreement is statistical (README "Numerics"), so
 * every bound is relative to HF's own bf16 error on these tokens, d = mean
 * |HF bf16 forward - HF fp32 forward| (hf_refs_bf16.json "forward" and
 * "forward_fp32"), and two-sided, so that an fp32 run or an ignored --dtype
 * fails:
 *  - bf16, not fp32: ratiocheck's forward lies on HF bf16's side of the
 *    midpoint between the two references: mean |score - HF bf16| <= d / 2 and
 *    mean |score - HF fp32| >= d / 2 (an fp32 trainer gives d and ~1e-6);
 *  - its worst token no further from HF bf16 than HF's bf16 worst token is
 *    from fp32: max |score - HF bf16| <= max |HF bf16 - HF fp32|;
 *  - the ratio std (against the logged bf16 generate) between HF's own
 *    forward against its generate (the same rounding on both sides, the
 *    smallest a second bf16 implementation can expect) and sqrt(2) x the std
 *    an exact (HF fp32) trainer gives against the same logged values (the
 *    trainer's bf16 error independent of the sampler's, of the same size).
 * Measured (engine kernels, 346 tokens): mean |score - HF bf16| 2.72e-3 =
 * 0.34 d, mean |score - HF fp32| 7.89e-3 = 1.0 d (d = 7.89e-3), max 0.0378
 * against HF's 0.0437; ratio std 7.26e-3 in [3.0e-4, 1.43e-2]. With
 * --dtype fp32 on the same file: 1.0 d and 8e-5 d. */
START_TEST(test_hf_bf16)
{
    rc_results r;
    score_into("hf_bf16.jsonl", "bf16", "bf16", &r);
    agreement a = compare_hf(&r, "bf16");
    const double std = r.lens[0].st.std, lo = a.hf_std, hi = sqrt(2.0) * a.hf32_std;
    printf("score bf16: mean |score - HF bf16| %.3g, measured max %.3g bound %.3g (d / 2; HF's bf16 error d)\n",
           a.mean_abs, a.mean_abs, 0.5 * a.hf_dtype_err);
    printf("score bf16: mean |score - HF fp32| %.3g, measured min %.3g bound %.3g (d / 2)\n", a.mean_abs_f32,
           a.mean_abs_f32, 0.5 * a.hf_dtype_err);
    printf("score bf16: max |score - HF bf16| measured max %.3g bound %.3g (HF's max |bf16 - fp32|)\n", a.max_abs,
           a.hf_dtype_max);
    printf("score bf16: ratio std %.3g in [%.3g, %.3g] (HF's own forward vs generate, sqrt(2) x an fp32 "
           "trainer's)\n", std, lo, hi);
    fflush(stdout);
    ck_assert_int_eq(r.lens[0].st.count, a.n);
    ck_assert_msg(a.mean_abs <= 0.5 * a.hf_dtype_err, "mean |score - HF bf16| %g > half HF's bf16 error %g: not "
                  "bf16", a.mean_abs, a.hf_dtype_err);
    ck_assert_msg(a.mean_abs_f32 >= 0.5 * a.hf_dtype_err, "mean |score - HF fp32| %g < half HF's bf16 error %g: "
                  "not bf16", a.mean_abs_f32, a.hf_dtype_err);
    ck_assert_msg(a.max_abs <= a.hf_dtype_max, "max |score - HF bf16| %g > HF's max bf16 error %g", a.max_abs,
                  a.hf_dtype_max);
    ck_assert_msg(std >= lo && std <= hi, "bf16 ratio std %g outside [%g, %g]", std, lo, hi);
    ck_assert(r.lens[0].st.clipfrac == 0);
    rc_results_free(&r);
}
END_TEST

/* the statistics line of --json output: count, mean, std, k3 of the only length */
static void stats_of(const char *args, char *buf, size_t n)
{
    int code = run("score -q --backend cpu --out none --json --dtype fp32 %s", args);
    ck_assert_msg(code == 0, "%s: exit %d: %s", args, code, g_err);
    json_error_t e;
    json_t *j = json_loads(g_out, 0, &e);
    ck_assert_msg(j != NULL, "%s", e.text);
    json_t *L = json_array_get(json_object_get(j, "lens"), 0);
    snprintf(buf, n, "%lld %.17g %.17g %.17g %lld", (long long)json_integer_value(json_object_get(L, "count")),
             json_real_value(json_object_get(L, "mean")), json_real_value(json_object_get(L, "std")),
             json_real_value(json_object_get(L, "k3")), (long long)json_integer_value(json_object_get(j, "sequences")));
    json_decref(j);
}

/* The same HF rollouts in every documented shape: the same statistics. */
START_TEST(test_formats)
{
    char want[256], got[256];
    stats_of("--rollouts hf_fp32.jsonl", want, sizeof want);
    static const char *const files[][2] = {
        {"vllm_completions_fp32.jsonl", "vllm"}, {"vllm_chat_fp32.jsonl", "vllm"},
        {"vllm_offline_fp32.json", "vllm"},      {"sglang_fp32.jsonl", "sglang"},
        {"hf_fp32.jsonl", "jsonl"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char a[512];
        snprintf(a, sizeof a, "--rollouts %s", files[i][0]);
        stats_of(a, got, sizeof got);
        ck_assert_msg(!strcmp(got, want), "%s: %s, jsonl %s", files[i][0], got, want);
        snprintf(a, sizeof a, "--rollouts %s --format %s", files[i][0], files[i][1]);
        stats_of(a, got, sizeof got);
        ck_assert_msg(!strcmp(got, want), "%s --format %s: %s", files[i][0], files[i][1], got);
    }
    /* ratiocheck's own HDF5: a score run's output re-scored gives the same */
    ck_assert_int_eq(run("score -q --backend cpu --rollouts hf_fp32.jsonl --dtype fp32 --out '%s/a.h5'", g_dir), 0);
    char a[PATH_MAX + 64];
    snprintf(a, sizeof a, "--rollouts '%s/a.h5'", g_dir);
    stats_of(a, got, sizeof got);
    ck_assert_msg(!strcmp(got, want), "h5: %s", got);
    snprintf(a, sizeof a, "--rollouts '%s/a.h5' --format h5", g_dir);
    stats_of(a, got, sizeof got);
    ck_assert_msg(!strcmp(got, want), "h5: %s", got);
    /* --len: each rollout counts its tokens t < L */
    ck_assert_int_eq(run("score -q --backend cpu --out none --json --dtype fp32 --rollouts hf_fp32.jsonl --len 5,10"), 0);
    json_t *rows = load_jsonl("hf_fp32.jsonl");
    int64_t want5 = 0, want10 = 0;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const int64_t n = (int64_t)json_array_size(json_object_get(json_array_get(rows, i), "response_ids"));
        want5 += n < 5 ? n : 5;
        want10 += n < 10 ? n : 10;
    }
    json_decref(rows);
    json_error_t e;
    json_t *j = json_loads(g_out, 0, &e);
    ck_assert_msg(j != NULL, "%s", e.text);
    json_t *lens = json_object_get(j, "lens");
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(lens, 0), "count")), want5);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(lens, 1), "count")), want10);
    json_decref(j);
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts hf_fp32.jsonl --len 30"), 2);
    /* TRL and verl dumps carry text only */
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts hf_fp32.jsonl --format trl"), 5);
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts hf_fp32.jsonl --format verl"), 5);
}
END_TEST

/* count, mean, std, min, max of the ratio of `score --json ARGS` (fp32 trainer);
 * exit 0 and nothing on stderr (no warning) asserted */
static void ratio_of(const char *args, double v[5])
{
    char s[256];
    stats_of(args, s, sizeof s);
    ck_assert_msg(g_err[0] == '\0', "%s: %s", args, g_err);
    json_error_t e;
    json_t *j = json_loads(g_out, 0, &e);
    ck_assert_msg(j != NULL, "%s", e.text);
    json_t *L = json_array_get(json_object_get(j, "lens"), 0);
    v[0] = (double)json_integer_value(json_object_get(L, "count"));
    v[1] = json_real_value(json_object_get(L, "mean"));
    v[2] = json_real_value(json_object_get(L, "std"));
    v[3] = json_real_value(json_object_get(L, "min"));
    v[4] = json_real_value(json_object_get(L, "max"));
    json_decref(j);
}

/* HF's processed log-probs (output_scores): refused as raw, reproduced when
 * declared. The bound of every declared case is the temperature-0.7 one's:
 * the fp32 noise floor (ratio std < 2e-6, |mean - 1| < 1e-6: HF's own fp32
 * forward against its generate is 8.6e-7, test_hf_fp32) and README's fp32
 * emulation bound, |log r| <= 1e-5 on every token. With top-k / top-p the
 * trainer renormalises over the kept set (rc_truncated_logprob), so the
 * renormalised files are held to the same bound, with no warning. */
static void assert_noise_floor(const char *args)
{
    double v[5];
    ratio_of(args, v);
    /* every logged token is scored: the count is the file's */
    char file[256];
    const char *ro = strstr(args, "--rollouts ");
    ck_assert(ro && sscanf(ro, "--rollouts %255s", file) == 1);
    json_t *rows = load_jsonl(file);
    int64_t want = 0;
    for (size_t q = 0; q < json_array_size(rows); q++)
        want += (int64_t)json_array_size(json_object_get(json_array_get(rows, q), "logprobs"));
    json_decref(rows);
    ck_assert_msg(want > 0 && v[0] == (double)want, "%s: %g tokens scored, the file logs %lld", args, v[0],
                  (long long)want);
    fprintf(stderr, "%s: %g tokens, ratio mean %.9g std %.3g, min %.9g max %.9g\n", args, v[0], v[1], v[2], v[3],
            v[4]);
    ck_assert_msg(v[2] < 2e-6 && fabs(v[1] - 1) < 1e-6, "%s: mean %g std %g", args, v[1], v[2]);
    ck_assert_msg(fabs(log(v[3])) <= 1e-5 && fabs(log(v[4])) <= 1e-5, "%s: min %.9g max %.9g", args, v[3], v[4]);
}

START_TEST(test_processed)
{
    ck_assert_int_eq(run("score -q --backend cpu --out none --dtype fp32 --rollouts hf_processed_t07_fp32.jsonl"), 4);
    ck_assert_msg(strstr(g_err, "look computed at another temperature") != NULL, "%s", g_err);
    /* temperature 0.7 only: the trainer at 0.7 gives HF's scores to fp32 rounding */
    assert_noise_floor("--rollouts hf_processed_t07_fp32.jsonl --logprobs-kind processed --temperature 0.7");
    /* renormalised over top-p 0.9 (top-k 20): undeclared, refused; declared, HF's values */
    ck_assert_int_eq(run("score -q --backend cpu --out none --dtype fp32 --rollouts hf_processed_t07_p09_fp32.jsonl"), 4);
    ck_assert_msg(strstr(g_err, "look top-k / top-p renormalised") != NULL, "%s", g_err);
    assert_noise_floor("--rollouts hf_processed_t07_p09_fp32.jsonl --logprobs-kind processed --temperature 0.7 "
                       "--top-p 0.9");
    assert_noise_floor("--rollouts hf_processed_t07_k20_p09_fp32.jsonl --logprobs-kind processed --temperature 0.7 "
                       "--top-k 20 --top-p 0.9");
    /* the same tokens with the scaled, not renormalised log-probs: right as
     * temperature 0.7 alone; with top-p declared, below the trainer's (warning) */
    assert_noise_floor("--rollouts hf_scaled_t07_p09_fp32.jsonl --logprobs-kind processed --temperature 0.7");
    ck_assert_int_eq(run("score -q --backend cpu --out none --dtype fp32 --rollouts hf_scaled_t07_p09_fp32.jsonl "
                         "--logprobs-kind processed --temperature 0.7 --top-p 0.9"), 0);
    ck_assert_msg(strstr(g_err, "warning") && strstr(g_err, "they look not renormalised"), "%s", g_err);
    /* declared settings that could not have sampled the tokens: refused */
    ck_assert_int_eq(run("score -q --backend cpu --out none --dtype fp32 --rollouts hf_processed_t07_p09_fp32.jsonl "
                         "--logprobs-kind processed --temperature 0.7 --top-p 0.5"), 4);
    ck_assert_msg(strstr(g_err, "logged tokens are outside the set top_k 0 / top_p 0.5 keeps"), "%s", g_err);
    ck_assert_int_eq(run("score -q --backend cpu --out none --dtype fp32 --rollouts hf_processed_t07_fp32.jsonl "
                         "--logprobs-kind processed --temperature 0.7 --top-p 0.9"), 4);
    ck_assert_msg(strstr(g_err, "outside the set top_k 0 / top_p 0.9 keeps"), "%s", g_err);
    /* the fp32 reference truncates too; the fp64 forward does not: refused */
    ck_assert_int_eq(run("score -q --backend cpu --out none --dtype fp32 --rollouts hf_processed_t07_p09_fp32.jsonl "
                         "--logprobs-kind processed --temperature 0.7 --top-p 0.9 --reference fp64"), 5);
    ck_assert_msg(strstr(g_err, "--reference fp64 with processed top-k / top-p"), "%s", g_err);
    ck_assert_int_eq(run("score -q --backend cpu --out none --json --dtype fp32 --rollouts hf_processed_t07_p09_fp32.jsonl "
                         "--logprobs-kind processed --temperature 0.7 --top-p 0.9 --reference fp32"), 0);
    ck_assert_msg(g_err[0] == '\0', "%s", g_err);
    /* the command line against the file */
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts hf_fp32.jsonl --temperature 0.5"), 2);
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts hf_fp32.jsonl --logprobs-kind processed"), 2);
}
END_TEST

/* the table's header: a score run counts rollouts (report prints the same);
 * a run keeps prompts x samples */
START_TEST(test_header)
{
    ck_assert_int_eq(run("score -q --backend cpu --rollouts hf_fp32.jsonl --dtype fp32 --out '%s/h.h5'", g_dir), 0);
    /* one temperature (the file's, in the sampler's text), no seed, no generation time: nothing is
     * sampled or generated; the dtype shown is the trainer's (--dtype fp32 there), not a base's */
    ck_assert_msg(strstr(g_out, "\n24 rollouts\n") && !strstr(g_out, "samples") && !strstr(g_out, "seed") &&
                  !strstr(g_out, "generation ") && !strstr(g_out, "  dtype "), "%s", g_out);
    ck_assert_msg(strstr(g_out, "temperature 1, top_k 0, top_p 1)") && strstr(g_out, "trainer dtype=fp32,"), "%s",
                  g_out);
    const char *t1 = strstr(g_out, "temperature");
    ck_assert_msg(t1 && !strstr(t1 + 1, "temperature"), "%s", g_out);
    char score_out[sizeof g_out];
    memcpy(score_out, g_out, sizeof g_out);
    ck_assert_int_eq(run("report '%s/h.h5'", g_dir), 0);
    ck_assert_msg(!strcmp(g_out, score_out), "report:\n%s\nscore:\n%s", g_out, score_out);
    ck_assert_int_eq(run("score -q --backend cpu --rollouts hf_fp32.jsonl --dtype bf16 --trainer dtype=fp32 --out "
                         "none"), 0);
    ck_assert_msg(strstr(g_out, "trainer dtype=fp32,") && !strstr(g_out, "dtype bf16"), "%s", g_out);
    ck_assert_int_eq(run("run -q --backend cpu --out none --dtype fp32 --num-prompts 2 --samples 2 --len 3"), 0);
    ck_assert_msg(strstr(g_out, "\n4 sequences (2 prompts x 2 samples), temperature 1") && !strstr(g_out, "rollouts,"),
                  "%s", g_out);
}
END_TEST

/* a new file NAME in g_dir, for writing */
static FILE *create_in_dir(const char *name)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_msg(f != NULL, "%s", p);
    return f;
}

/* a file in g_dir */
static void write_file(const char *name, const char *body)
{
    FILE *f = create_in_dir(name);
    fputs(body, f);
    fclose(f);
}

/* hf_fp32.jsonl (repeated `repeat` times) with the logged log-probs moved by one token */
static void write_shifted(const char *name, int shift, int repeat)
{
    json_t *rows = load_jsonl("hf_fp32.jsonl");
    FILE *f = create_in_dir(name);
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *o = json_array_get(rows, i);
        json_t *ids = json_object_get(o, "response_ids"), *lp = json_object_get(o, "logprobs");
        const size_t n = json_array_size(ids);
        if (shift > 0) { /* logged[t] = the log-prob of token t + 1 */
            json_array_remove(ids, n - 1);
            json_array_remove(lp, 0);
        } else { /* logged[t] = the log-prob of token t - 1 (the prompt's last one kept first) */
            json_array_remove(lp, n - 1);
            json_array_insert_new(lp, 0, json_real(-1.0));
        }
        char *s = json_dumps(o, JSON_COMPACT);
        for (int k = 0; k < repeat; k++)
            fprintf(f, "%s\n", s);
        free(s);
    }
    fclose(f);
    json_decref(rows);
}

static const char k_ok[] = "{\"prompt_ids\": [1, 2], \"response_ids\": [3, 4], \"logprobs\": [-1.5, -2.5]}\n";

/* Every check: exit code, one line naming FILE:LINE, and no output file. */
START_TEST(test_alignment_errors)
{
    static const struct {
        const char *name, *line2, *msg;
        int code;
    } bad[] = {
        {"count.jsonl", "{\"prompt_ids\": [1], \"response_ids\": [3, 4, 5], \"logprobs\": [-1, -2]}", "3 response token ids but 2 log-probs", 4},
        {"vocab.jsonl", "{\"prompt_ids\": [1], \"response_ids\": [3, 4096], \"logprobs\": [-1, -2]}", "response_ids[1] = 4096 is outside the model's vocabulary", 4},
        {"pvocab.jsonl", "{\"prompt_ids\": [-1], \"response_ids\": [3], \"logprobs\": [-1]}", "prompt_ids[0] = -1 is outside", 4},
        {"positive.jsonl", "{\"prompt_ids\": [1], \"response_ids\": [3, 4], \"logprobs\": [-1, 0.5]}", "logprobs[1] = 0.5 is positive", 4},
        {"nan.jsonl", "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [NaN]}", "NaN in the record", 4},
        {"inf.jsonl", "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-Infinity]}", "Infinity in the record", 4},
        {"null.jsonl", "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [null]}", "logprobs[0] is null", 4},
        {"string.jsonl", "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [\"-1\"]}", "logprobs[0] is not a number", 4},
        {"noprompt.jsonl", "{\"prompt_ids\": [], \"response_ids\": [3], \"logprobs\": [-1]}", "the prompt has no token ids", 4},
        {"long.jsonl", "{\"prompt_ids\": [1], \"response_ids\": [LONG], \"logprobs\": [LP]}", "exceeds the model's 256 positions", 4},
        {"json.jsonl", "{\"prompt_ids\": [1], \"response_ids\": [3], ", "invalid JSON", 4},
        {"temp.jsonl", "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1], \"temperature\": 0.5}", "temperature 0.5 differs from the 1 of line 1", 4},
        {"kind.jsonl", "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1], \"logprobs_kind\": \"odd\"}", "is not \"raw\" or \"processed\"", 4},
        {"vllm_noids.jsonl", "{\"choices\": [{\"index\": 0, \"text\": \"a\", \"logprobs\": {\"tokens\": [\"a\"], \"token_logprobs\": [-1]}, \"prompt_token_ids\": [1]}]}", "is not \"token_id:N\"", 4},
    };
    char longids[2048] = "", longlp[2048] = "";
    for (int i = 0; i < 300; i++) {
        strcat(longids, i ? ",3" : "3");
        strcat(longlp, i ? ",-1" : "-1");
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[8192], l2[4096];
        snprintf(l2, sizeof l2, "%s", bad[i].line2);
        char *x = strstr(l2, "LONG");
        if (x) {
            char tmp[4096];
            snprintf(tmp, sizeof tmp, "{\"prompt_ids\": [1], \"response_ids\": [%s], \"logprobs\": [%s]}", longids, longlp);
            snprintf(l2, sizeof l2, "%s", tmp);
        }
        /* the vLLM case needs a vLLM first line */
        const char *first = !strcmp(bad[i].name, "temp.jsonl") ?
            "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1], \"temperature\": 1.0}\n" :
            strstr(bad[i].name, "vllm") ?
            "{\"choices\": [{\"index\": 0, \"text\": \"\", \"logprobs\": {\"tokens\": [\"token_id:3\"], \"token_logprobs\": [-1]}, \"prompt_token_ids\": [1]}]}\n" : k_ok;
        snprintf(body, sizeof body, "%s%s\n", first, l2);
        write_file(bad[i].name, body);
        int code = run("score -q --backend cpu --rollouts '%s/%s' --out '%s/o.h5'", g_dir, bad[i].name, g_dir);
        ck_assert_msg(code == bad[i].code, "%s: exit %d: %s", bad[i].name, code, g_err);
        char where[PATH_MAX + 64];
        snprintf(where, sizeof where, "%s/%s:2: ", g_dir, bad[i].name);
        ck_assert_msg(strstr(g_err, where) && strstr(g_err, bad[i].msg), "%s: '%s'", bad[i].name, g_err);
        ck_assert_msg(strchr(g_err, '\n') == g_err + strlen(g_err) - 1, "%s: more than one line: %s", bad[i].name,
                      g_err);
        char o[PATH_MAX + 8];
        snprintf(o, sizeof o, "%s/o.h5", g_dir);
        ck_assert_msg(access(o, F_OK) != 0, "%s: output written", bad[i].name);
    }
    /* ids past the bundled model's vocabulary, no --model: the message says which model was used */
    ck_assert_int_eq(run("score -q --backend cpu --rollouts '%s/vocab.jsonl' --out none", g_dir), 4);
    ck_assert_msg(strstr(g_err, "without --model the bundled model (") && strstr(g_err, "give --model DIR") &&
                  strchr(g_err, '\n') == g_err + strlen(g_err) - 1, "'%s'", g_err);
    ck_assert_int_eq(run("score -q --backend cpu --model ../../models/pythia-rc-tiny --rollouts '%s/vocab.jsonl' "
                         "--out none", g_dir), 4);
    ck_assert_msg(strstr(g_err, "outside the model's vocabulary") && !strstr(g_err, "without --model"), "'%s'",
                  g_err);
    /* formats without ids */
    write_file("verl.jsonl", "{\"input\": \"q\", \"output\": \"a\", \"gts\": \"a\", \"score\": 1.0, \"step\": 1}\n");
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts '%s/verl.jsonl'", g_dir), 5);
    ck_assert_msg(strstr(g_err, "verl") != NULL, "%s", g_err);
    write_file("trl.jsonl", "{\"step\": 1, \"prompt\": \"q\", \"completion\": \"a\", \"reward\": 1.0}\n");
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts '%s/trl.jsonl'", g_dir), 5);
    ck_assert_msg(strstr(g_err, "TRL") != NULL, "%s", g_err);
    write_file("empty.jsonl", "\n\n");
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts '%s/empty.jsonl'", g_dir), 4);
    ck_assert_int_eq(run("score -q --backend cpu --out none"), 2);
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts hf_fp32.jsonl --prompts x.txt"), 2);
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts hf_fp32.jsonl --format nope"), 2);
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts '%s/missing.jsonl'", g_dir), 6);
}
END_TEST

/* a one-token shift either way is refused, naming the shift */
START_TEST(test_shift)
{
    write_shifted("plus.jsonl", 1, 1);
    ck_assert_int_eq(run("score -q --backend cpu --dtype fp32 --rollouts '%s/plus.jsonl' --out '%s/o.h5'", g_dir, g_dir), 4);
    ck_assert_msg(strstr(g_err, "shifted by +1 token") != NULL, "%s", g_err);
    write_shifted("minus.jsonl", -1, 1);
    ck_assert_int_eq(run("score -q --backend cpu --dtype fp32 --rollouts '%s/minus.jsonl' --out '%s/o.h5'", g_dir, g_dir), 4);
    ck_assert_msg(strstr(g_err, "shifted by -1 token") != NULL, "%s", g_err);
    /* more than 256 rollouts: found on the first 64, before the whole forward */
    write_shifted("many.jsonl", 1, 13);
    ck_assert_int_eq(run("score -q --backend cpu --dtype fp32 --rollouts '%s/many.jsonl' --out '%s/o.h5'", g_dir, g_dir), 4);
    ck_assert_msg(strstr(g_err, "shifted by +1 token") != NULL, "%s", g_err);
    char o[PATH_MAX + 8];
    snprintf(o, sizeof o, "%s/o.h5", g_dir);
    ck_assert(access(o, F_OK) != 0);
}
END_TEST

/* vllm_completions_fp32.jsonl with the text of every choice (all) or of
 * record 2's first choice changed */
static void write_text_changed(const char *name, bool all)
{
    json_t *rows = load_jsonl("vllm_completions_fp32.jsonl");
    FILE *f = create_in_dir(name);
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *ch = json_object_get(json_array_get(rows, i), "choices");
        for (size_t c = 0; c < json_array_size(ch); c++)
            if (all || (i == 1 && c == 0))
                json_object_set_new(json_array_get(ch, c), "text", json_string("something else"));
        char *t = json_dumps(json_array_get(rows, i), JSON_COMPACT);
        fprintf(f, "%s\n", t);
        free(t);
    }
    fclose(f);
    json_decref(rows);
}

/* the response text against the ids decoded with the model's tokenizer: the
 * fixtures' texts are HF's decode and pass; all different is refused, one
 * different is a warning */
START_TEST(test_text)
{
    ck_assert_int_eq(run("score --check-only --rollouts vllm_chat_fp32.jsonl"), 0);
    ck_assert_msg(g_err[0] == '\0', "%s", g_err);
    write_text_changed("all.jsonl", true);
    ck_assert_int_eq(run("score -q --backend cpu --rollouts '%s/all.jsonl' --out '%s/o.h5'", g_dir, g_dir), 4);
    char where[PATH_MAX + 64];
    snprintf(where, sizeof where, "%s/all.jsonl:1: the response text differs", g_dir);
    ck_assert_msg(strstr(g_err, where) != NULL, "%s", g_err);
    write_text_changed("one.jsonl", false);
    ck_assert_int_eq(run("score --check-only --rollouts '%s/one.jsonl'", g_dir), 0);
    ck_assert_msg(strstr(g_err, "warning") && strstr(g_err, "one.jsonl:2: the response text of 1 of 24"), "%s",
                  g_err);
}
END_TEST

/* a sweep over trainer settings on the logged rollouts: the noise floor is
 * bitwise the base; the bf16 trainer row against the HF fp32 rollouts is
 * far from the fp32 base; the sampler cannot vary */
static int run_args(const char *args)
{
    return run("%s", args);
}

/* a scalar string attribute of /verdict (NULL when absent; free()) */
static char *verdict_attr(const char *file, const char *name)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "%s", file);
    hid_t g = H5Gopen2(f, "/verdict", H5P_DEFAULT);
    ck_assert(g >= 0);
    char *out = NULL;
    if (H5Aexists(g, name) > 0) {
        hid_t a = H5Aopen(g, name, H5P_DEFAULT), mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, H5T_CSET_UTF8);
        char *s = NULL;
        ck_assert_int_ge(H5Aread(a, mt, &s), 0);
        out = strdup(s);
        H5free_memory(s);
        H5Tclose(mt);
        H5Aclose(a);
    }
    H5Gclose(g);
    H5Fclose(f);
    return out;
}

/* --fail-on / --fail-above on score: exit 3 exactly when its own JSON (without a gate) says a
 * verdict line reaches the level; the gate in the HDF5 file, whole or written in chunks */
START_TEST(test_fail_on)
{
    static const char *const cfgs[] = {"--dtype fp32", "--dtype fp16 --seq-eps 1", "--dtype bf16"};
    int seen[3] = {0, 0, 0};
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        char base[512];
        snprintf(base, sizeof base, "score -q --backend cpu --out none --rollouts hf_fp32.jsonl %s", cfgs[c]);
        rc_gate_check(run_args, g_out, base, seen, c == 2);
    }
    ck_assert_int_gt(seen[0], 0); /* a run whose worst line is OK, one WARN, one FAIL */
    ck_assert_int_gt(seen[1], 0);
    ck_assert_int_gt(seen[2], 0);
    static const char *const chunk[] = {"", "--chunk-rollouts 3"};
    for (int k = 0; k < 2; k++) {
        char p[PATH_MAX + 16];
        snprintf(p, sizeof p, "%s/g%d.h5", g_dir, k);
        ck_assert_int_eq(run("score -q --backend cpu --rollouts hf_fp32.jsonl --dtype bf16 %s --fail-on warn "
                             "--fail-above k3=1 --out '%s'", chunk[k], p), 3);
        char *gate = verdict_attr(p, "gate"), *rules = verdict_attr(p, "gate_rules"),
             *failed = verdict_attr(p, "gate_failed");
        ck_assert_str_eq(gate, "FAIL");
        ck_assert_str_eq(rules, "--fail-above k3=1 --fail-on warn");
        ck_assert_ptr_nonnull(strstr(failed, "gspo FAIL"));
        free(gate);
        free(rules);
        free(failed);
        snprintf(p, sizeof p, "%s/n%d.h5", g_dir, k); /* no gate: no attribute */
        ck_assert_int_eq(run("score -q --backend cpu --rollouts hf_fp32.jsonl --dtype bf16 %s --out '%s'", chunk[k], p), 0);
        ck_assert_ptr_null(verdict_attr(p, "gate"));
    }
}
END_TEST

START_TEST(test_sweep)
{
    ck_assert_int_eq(run("score -q --backend cpu --out none --json --dtype fp32 --rollouts hf_fp32.jsonl --vary trainer:dtype=bf16"),
                     0);
    json_error_t e;
    json_t *j = json_loads(g_out, 0, &e);
    ck_assert_msg(j != NULL, "%s", e.text);
    json_t *rows = json_object_get(json_object_get(j, "sweep"), "rows");
    ck_assert_int_eq((int64_t)json_array_size(rows), 2);
    ck_assert(json_is_true(json_object_get(json_array_get(rows, 0), "identical_to_base")));
    const double base = json_real_value(json_object_get(json_array_get(json_object_get(j, "lens"), 0), "std"));
    const double bf16 = json_real_value(json_object_get(json_array_get(rows, 1), "std"));
    ck_assert_msg(bf16 > 1000 * base, "bf16 trainer std %g, fp32 %g", bf16, base);
    json_decref(j);
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts hf_fp32.jsonl --vary sampler:dtype=bf16"), 2);
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts hf_fp32.jsonl --vary trainer:nope=1"), 2);
    ck_assert_int_eq(run("score -q --backend cpu --rollouts hf_fp32.jsonl --sweep --out '%s/s.h5'", g_dir), 0);
    ck_assert_msg(strstr(g_out, "trainer: lm-head=fp32") && strstr(g_out, "noise floor: the base replayed is bitwise "
                  "identical"), "%s", g_out);
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/s.h5", g_dir);
    ck_assert(access(p, F_OK) == 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* a file scored in chunks (--chunk-rollouts) against the same file at once  */

/* hf_fp32.jsonl's first n rollouts into g_dir/name, with `bad` (a whole
 * line) in place of line bad_line (0: none) */
static void write_first(const char *name, size_t n, size_t bad_line, const char *bad)
{
    json_t *rows = load_jsonl("hf_fp32.jsonl");
    ck_assert_uint_ge(json_array_size(rows), n);
    FILE *f = create_in_dir(name);
    for (size_t i = 0; i < n; i++) {
        if (i + 1 == bad_line) {
            fprintf(f, "%s\n", bad);
            continue;
        }
        char *s = json_dumps(json_array_get(rows, i), JSON_COMPACT);
        fprintf(f, "%s\n", s);
        free(s);
    }
    fclose(f);
    json_decref(rows);
}

/* every dataset of a results file, with its bytes in its own (native) type */
typedef struct {
    char names[256][96];
    int n;
} ds_list;
static herr_t list_ds(hid_t loc, const char *name, const H5L_info_t *info, void *data)
{
    (void)info;
    ds_list *l = data;
    hid_t o = H5Oopen(loc, name, H5P_DEFAULT);
    if (o >= 0 && H5Iget_type(o) == H5I_DATASET && l->n < 256)
        snprintf(l->names[l->n++], sizeof l->names[0], "%s", name);
    if (o >= 0)
        H5Oclose(o);
    return 0;
}

/* dataset name of two files: same shape, same bytes (variable-length strings: skipped, *vlen set) */
static void same_dataset(hid_t fa, hid_t fb, const char *name, bool *vlen)
{
    hid_t da = H5Dopen2(fa, name, H5P_DEFAULT), db = H5Dopen2(fb, name, H5P_DEFAULT);
    ck_assert_msg(da >= 0 && db >= 0, "dataset %s in both files", name);
    hid_t ta = H5Dget_type(da), na = H5Tget_native_type(ta, H5T_DIR_ASCEND);
    *vlen = H5Tis_variable_str(ta) > 0;
    hid_t sa = H5Dget_space(da), sb = H5Dget_space(db);
    const hssize_t ea = H5Sget_simple_extent_npoints(sa), eb = H5Sget_simple_extent_npoints(sb);
    ck_assert_msg(ea == eb, "%s: %lld and %lld elements", name, (long long)ea, (long long)eb);
    if (!*vlen && ea > 0) {
        const size_t bytes = (size_t)ea * H5Tget_size(na);
        char *a = malloc(bytes), *b = malloc(bytes);
        ck_assert(a && b);
        ck_assert(H5Dread(da, na, H5S_ALL, H5S_ALL, H5P_DEFAULT, a) >= 0);
        ck_assert(H5Dread(db, na, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) >= 0);
        ck_assert_msg(memcmp(a, b, bytes) == 0, "%s differs between the chunked and the single run", name);
        free(a);
        free(b);
    }
    H5Sclose(sa);
    H5Sclose(sb);
    H5Tclose(na);
    H5Tclose(ta);
    H5Dclose(da);
    H5Dclose(db);
}

/* the --json object without what differs between two runs of the same scoring */
static json_t *json_stats(void)
{
    json_error_t e;
    json_t *j = json_loads(g_out, 0, &e);
    ck_assert_msg(j != NULL, "%s: %s", e.text, g_out);
    static const char *const drop[] = {"command_line", "created", "output", "seconds", "seconds_generate",
                                       "seconds_forward", "seconds_reference", "seconds_total"};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        json_object_del(j, drop[i]);
    return j;
}

/* 23 rollouts in chunks of 3 (7 chunks and one of 2), forward batches of 3 in
 * both runs so that the batches are the same rows: every tensor of the file
 * bitwise equal, and every statistic printed (--json: counts, means, std,
 * quantiles, strata, corrections, cross-length, verdict, growth) equal. The
 * quantiles and strata are exact (bitwise) because the run has fewer than
 * RC_STATS_EXACT_TOKENS tokens per length. */
START_TEST(test_chunks)
{
    write_first("c.jsonl", 23, 0, NULL);
    static const char common[] = "score -q --backend cpu --json --dtype bf16 --forward-batch 3 --len 5,10,20 --reference fp32";
    ck_assert_int_eq(run("%s --rollouts '%s/c.jsonl' --out '%s/one.h5'", common, g_dir, g_dir), 0);
    json_t *one = json_stats();
    ck_assert_int_eq(run("%s --chunk-rollouts 3 --rollouts '%s/c.jsonl' --out '%s/chunks.h5'", common, g_dir, g_dir),
                     0);
    json_t *chunks = json_stats();
    char *a = json_dumps(one, JSON_SORT_KEYS), *b = json_dumps(chunks, JSON_SORT_KEYS);
    ck_assert_msg(json_equal(one, chunks), "statistics differ:\n%s\n%s", a, b);
    ck_assert_int_eq((int)json_integer_value(json_object_get(chunks, "sequences")), 23);
    free(a);
    free(b);
    json_decref(one);
    json_decref(chunks);
    char pa[PATH_MAX + 16], pb[PATH_MAX + 16];
    snprintf(pa, sizeof pa, "%s/one.h5", g_dir);
    snprintf(pb, sizeof pb, "%s/chunks.h5", g_dir);
    hid_t fa = H5Fopen(pa, H5F_ACC_RDONLY, H5P_DEFAULT), fb = H5Fopen(pb, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(fa >= 0 && fb >= 0);
    ds_list la = {0}, lb = {0};
    ck_assert(H5Lvisit(fa, H5_INDEX_NAME, H5_ITER_INC, list_ds, &la) >= 0);
    ck_assert(H5Lvisit(fb, H5_INDEX_NAME, H5_ITER_INC, list_ds, &lb) >= 0);
    ck_assert_int_eq(la.n, lb.n);
    ck_assert_int_lt(la.n, 256);
    ck_assert_int_ge(la.n, 20); /* prompts, rollouts, reference, 3 lengths, strata */
    int strings = 0;
    for (int i = 0; i < la.n; i++) {
        ck_assert_str_eq(la.names[i], lb.names[i]);
        bool vlen;
        same_dataset(fa, fb, la.names[i], &vlen);
        strings += vlen;
    }
    H5Fclose(fa);
    H5Fclose(fb);
    rc_results ra, rb; /* the completions (strings) through the reader */
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    ck_assert(rc_h5_read(pa, &ra) == RC_OK && rc_h5_read(pb, &rb) == RC_OK);
    ck_assert(ra.completion && rb.completion);
    for (int64_t q = 0; q < ra.n_seq; q++)
        ck_assert_str_eq(ra.completion[q], rb.completion[q]);
    ck_assert_int_eq(strings, 1);
    rc_results_free(&ra);
    rc_results_free(&rb);
    /* a file of several chunks is not held at once: --show needs it, refused */
    ck_assert_int_eq(run("score -q --backend cpu --chunk-rollouts 3 --show 1 --rollouts '%s/c.jsonl' --out none", g_dir), 2);
    ck_assert_msg(strstr(g_err, "more than one chunk"), "%s", g_err);
    ck_assert_int_eq(run("score -q --backend cpu --chunk-rollouts 0 --rollouts '%s/c.jsonl' --out none", g_dir), 2);
    ck_assert_int_eq(run("score -q --backend cpu --chunk-rollouts 10 --rollouts '%s/c.jsonl' --out none", g_dir), 0);
    ck_assert_msg(strstr(g_out, "23 rollouts"), "%s", g_out);
}
END_TEST

/* A bad record or a changed setting on a late line (a later chunk) is
 * found as the file is read: exit 4 naming FILE:LINE, no output file. */
START_TEST(test_chunks_late_error)
{
    write_first("late.jsonl", 23, 22, "{\"prompt_ids\": [1], \"response_ids\": [3, 4], \"logprobs\": [-1, 0.5]}");
    char out[PATH_MAX + 16];
    snprintf(out, sizeof out, "%s/late.h5", g_dir);
    ck_assert_int_eq(run("score -q --backend cpu --chunk-rollouts 3 --rollouts '%s/late.jsonl' --out '%s'", g_dir, out), 4);
    ck_assert_msg(strstr(g_err, "late.jsonl:22: logprobs[1] = 0.5 is positive"), "%s", g_err);
    ck_assert_msg(!strchr(g_err, '\n') || strchr(g_err, '\n') == g_err + strlen(g_err) - 1, "one line: %s", g_err);
    ck_assert(access(out, F_OK) != 0);
    write_first("late_t.jsonl", 23, 20, "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1], "
                "\"temperature\": 0.7}");
    ck_assert_int_eq(run("score -q --backend cpu --chunk-rollouts 3 --rollouts '%s/late_t.jsonl' --out '%s'", g_dir, out), 4);
    ck_assert_msg(strstr(g_err, "late_t.jsonl:20: temperature 0.7 differs from the 1 of line 1"), "%s", g_err);
    ck_assert(access(out, F_OK) != 0);
    ck_assert_int_eq(run("score -q --backend cpu --chunk-rollouts 3 --check-only --rollouts '%s/late.jsonl'", g_dir), 4);
    ck_assert_msg(strstr(g_err, "late.jsonl:22:"), "%s", g_err);
    DIR *d = opendir(g_dir); /* no temporary file left either */
    ck_assert(d != NULL);
    for (struct dirent *e; (e = readdir(d));)
        ck_assert_msg(!strstr(e->d_name, ".tmp."), "left behind: %s", e->d_name);
    closedir(d);
}
END_TEST


/* score's alignment hypotheses (align.h) on data/fixtures/align/
 * (tools/fixtures/make_align_fixtures.py: HF's log_softmax(logits / T) of rollouts it
 * sampled at T): a file logged at T 0.7 or 1.3 but read as raw (no key, or
 * "temperature" without "logprobs_kind") is refused naming the fitted T, the
 * one that states both passes with no warning; another tokenizer's ids are
 * named with their text (the decode differs) and without it (their rank in
 * the model's distribution). The T each file was made with and the token
 * counts come from the fixture. */
static int64_t align_tokens(const char *rel)
{
    json_t *rows = load_jsonl(rel);
    int64_t n = 0;
    for (size_t q = 0; q < json_array_size(rows); q++)
        n += (int64_t)json_array_size(json_object_get(json_array_get(rows, q), "logprobs"));
    json_decref(rows);
    return n;
}

START_TEST(test_align_hypotheses)
{
    json_t *v = load_json("../align/versions.json");
    const json_t *temps = json_object_get(v, "temperatures");
    ck_assert_int_eq((int)json_array_size(temps), 2);
    static const char *const tag[2] = {"07", "13"};
    for (int k = 0; k < 2; k++) {
        const double T = json_number_value(json_array_get(temps, k));
        for (int key = 0; key < 2; key++) {
            char f[64];
            snprintf(f, sizeof f, "../align/t%s_%s.jsonl", tag[k], key ? "key" : "nokey");
            const int64_t n = align_tokens(f), used = n < RC_ALIGN_MAX_TOKENS ? n : RC_ALIGN_MAX_TOKENS;
            ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts %s", f), 4);
            ck_assert_msg(strstr(g_err, "look computed at another temperature"), "%s: %s", f, g_err);
            char want[96];
            snprintf(want, sizeof want, "over the first %lld tokens they fit log_softmax(logits / ", (long long)used);
            const char *at = strstr(g_err, want);
            ck_assert_msg(at, "%s: %s", f, g_err);
            const double fit = strtod(at + strlen(want), NULL);
            ck_assert_msg(fabs(fit - T) < 0.01 * T, "%s: fitted %g, made at %g", f, fit, T);
            ck_assert_msg(strstr(g_err, key ? "the file states temperature" : "declare \"temperature\""), "%s: %s", f,
                          g_err);
        }
        char f[64];
        snprintf(f, sizeof f, "../align/t%s_declared.jsonl", tag[k]);
        ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts %s", f), 0);
        ck_assert_msg(g_err[0] == '\0', "%s: %s", f, g_err);
    }
    json_decref(v);
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts ../align/othertok_notext.jsonl"), 4);
    ck_assert_msg(strstr(g_err, "the logged ids look like another tokenizer's"), "%s", g_err);
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts ../align/othertok_text.jsonl"), 4);
    ck_assert_msg(strstr(g_err, "the ids come from another tokenizer"), "%s", g_err);
    /* this model's own sampled rollouts: no hypothesis against them, no warning */
    ck_assert_int_eq(run("score -q --backend cpu --out none --rollouts hf_bf16.jsonl"), 0);
    ck_assert_msg(g_err[0] == '\0', "%s", g_err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("score");
    TCase *tc = tcase_create("score");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_hf_fp32);
    tcase_add_test(tc, test_hf_bf16);
    tcase_add_test(tc, test_formats);
    tcase_add_test(tc, test_processed);
    tcase_add_test(tc, test_header);
    tcase_add_test(tc, test_alignment_errors);
    tcase_add_test(tc, test_shift);
    tcase_add_test(tc, test_text);
    tcase_add_test(tc, test_sweep);
    tcase_add_test(tc, test_fail_on);
    tcase_add_test(tc, test_chunks);
    tcase_add_test(tc, test_chunks_late_error);
    suite_add_tcase(s, tc);
    tc = tcase_create("align"); /* a meson test of its own (tests/meson.build) */
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_align_hypotheses);
    suite_add_tcase(s, tc);
    const char *only = getenv("CK_RUN_CASE");
    if (only && !suite_tcase(s, only)) { /* a renamed case must not pass by running nothing */
        fprintf(stderr, "score: no test case \"%s\" (CK_RUN_CASE)\n", only);
        return EXIT_FAILURE;
    }
    return rc_test_run(s);
}
