/* ratiocheck score of a file that carries both sides: `trainer_logprobs`
 * beside the sampler's `logprobs` (docs/score.md "Both sides logged").
 * Hostile values of the new key, the run without a model (no forward, the
 * logged numbers bit for bit in the file), a results file read back as
 * input, and the three columns with --model (which side is off). The
 * statistics themselves are recomputed with numpy from the JSONL by
 * tests/check_logged.sh. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "results.h"
#include "testutil.h"

static char g_out[1 << 18], g_err[1 << 16];
static char g_dir[PATH_MAX];

/* `ratiocheck ARGS` from data/fixtures/score/; the exit code */
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

static void write_file(const char *name, const char *body)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_msg(f != NULL, "%s", p);
    fputs(body, f);
    fclose(f);
}

static json_t *load_jsonl(const char *path)
{
    json_t *arr = json_array();
    json_error_t e;
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, &e);
        ck_assert_msg(o != NULL, "%s: %s", path, e.text);
        json_array_append_new(arr, o);
    }
    free(line);
    fclose(f);
    return arr;
}

static const char k_ok[] =
    "{\"prompt_ids\": [1, 2], \"response_ids\": [3, 4], \"logprobs\": [-1.5, -2.5], \"trainer_logprobs\": [-1.4, "
    "-2.6]}\n";

/* every hostile trainer_logprobs: exit 4, one line naming FILE:2, no output */
START_TEST(test_hostile)
{
    static const struct {
        const char *name, *line1, *line2, *msg;
    } bad[] = {
        {"count.jsonl", k_ok, "{\"prompt_ids\": [1], \"response_ids\": [3, 4], \"logprobs\": [-1, -2], \"trainer_logprobs\": [-1]}", "2 response token ids but 1 trainer_logprobs"},
        {"more.jsonl", k_ok, "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1], \"trainer_logprobs\": [-1, -2]}", "1 response token ids but 2 trainer_logprobs"},
        {"positive.jsonl", k_ok, "{\"prompt_ids\": [1], \"response_ids\": [3, 4], \"logprobs\": [-1, -2], \"trainer_logprobs\": [-1, 0.5]}", "trainer_logprobs[1] = 0.5 is positive"},
        {"null.jsonl", k_ok, "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1], \"trainer_logprobs\": [null]}", "trainer_logprobs[0] is null"},
        {"string.jsonl", k_ok, "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1], \"trainer_logprobs\": [\"-1\"]}", "trainer_logprobs[0] is not a number"},
        {"object.jsonl", k_ok, "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1], \"trainer_logprobs\": {\"a\": 1}}", "trainer_logprobs is not an array"},
        {"huge.jsonl", k_ok, "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1], \"trainer_logprobs\": [-1e300]}", "is not a finite log-probability"},
        {"nan.jsonl", k_ok, "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1], \"trainer_logprobs\": [NaN]}", "NaN in the record"},
        {"missing.jsonl", k_ok, "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1]}", "has no trainer_logprobs but line 1 has them (every record or none)"},
        {"extra.jsonl", "{\"prompt_ids\": [1, 2], \"response_ids\": [3, 4], \"logprobs\": [-1.5, -2.5]}\n", "{\"prompt_ids\": [1], \"response_ids\": [3], \"logprobs\": [-1], \"trainer_logprobs\": [-1]}", "has trainer_logprobs but line 1 has none (every record or none)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[4096];
        snprintf(body, sizeof body, "%s%s\n", bad[i].line1, bad[i].line2);
        write_file(bad[i].name, body);
        /* without --model (both sides logged, or the bundled model for extra.jsonl) and with it */
        for (int m = 0; m < 2; m++) {
            int code = run("score -q --backend cpu --rollouts '%s/%s' --out '%s/o.h5'%s", g_dir, bad[i].name, g_dir,
                           m ? " --model ../../models/pythia-rc-tiny" : "");
            ck_assert_msg(code == 4, "%s: exit %d: %s", bad[i].name, code, g_err);
            char where[PATH_MAX + 64];
            snprintf(where, sizeof where, "%s/%s:2: ", g_dir, bad[i].name);
            ck_assert_msg(strstr(g_err, where) && strstr(g_err, bad[i].msg), "%s: '%s'", bad[i].name, g_err);
            ck_assert_msg(strchr(g_err, '\n') == g_err + strlen(g_err) - 1, "%s: more than one line: %s",
                          bad[i].name, g_err);
            char o[PATH_MAX + 8];
            snprintf(o, sizeof o, "%s/o.h5", g_dir);
            ck_assert_msg(access(o, F_OK) != 0, "%s: output written", bad[i].name);
        }
    }
}
END_TEST

/* No model: ids of any vocabulary, no forward, the logged numbers in the
 * file bit for bit, --check-only, the default output name, the options that
 * need a model refused, and the file read back as input */
START_TEST(test_no_model)
{
    /* ids far past the bundled model's vocabulary: no model reads them */
    write_file("big_ids.jsonl", "{\"prompt_ids\": [150000], \"response_ids\": [151000, 7], \"logprobs\": [-1.5, "
                                "-0.25], \"trainer_logprobs\": [-1.25, -0.25]}\n");
    ck_assert_int_eq(run("score --backend cpu --rollouts '%s/big_ids.jsonl' --out '%s/b.h5'", g_dir, g_dir), 0);
    ck_assert_msg(strstr(g_out, "model none (both sides logged)") && strstr(g_out, "trainer logged (trainer_logprobs)")
                  && strstr(g_out, "no forward") && strstr(g_out, "first generated token"), "%s", g_out);
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/b.h5", g_dir);
    rc_results r;
    ck_assert(rc_h5_read(p, &r) == RC_OK);
    ck_assert_int_eq(r.n_seq, 1);
    ck_assert_int_eq(r.gen_len, 2);
    ck_assert(r.logprob_trainer != NULL && r.logprob_ratiocheck == NULL && r.threeway == NULL);
    ck_assert(r.logprob_gen[0] == -1.5f && r.logprob_gen[1] == -0.25f);
    ck_assert(r.logprob_trainer[0] == -1.25f && r.logprob_trainer[1] == -0.25f);
    ck_assert(r.lens[0].logprob_fwd[0] == -1.25f && r.lens[0].logprob_fwd[1] == -0.25f);
    ck_assert_int_eq(r.lens[0].st.count, 2);
    ck_assert_int_eq(r.lens[0].st.first_count, 1);
    ck_assert(fabs(r.lens[0].st.first_mean_abs_log_ratio - 0.25) < 1e-15);
    ck_assert(r.lens[0].st.later_mean_abs_log_ratio == 0.0);
    ck_assert(fabs(r.lens[0].st.identical_frac - 0.5) < 1e-15);
    ck_assert_int_eq(r.gen_tokens[0], 151000);
    rc_results_free(&r);
    /* the results file as input: both sides again, the same statistics */
    ck_assert_int_eq(run("score -q --backend cpu --rollouts '%s/b.h5' --json --out none", g_dir), 0);
    ck_assert_msg(strstr(g_out, "\"trainer\": \"logged (trainer_logprobs)\"") &&
                  strstr(g_out, "\"first_token_mean_abs_log_ratio\": 0.25,"), "%s", g_out);
    /* --check-only says what the file holds */
    ck_assert_int_eq(run("score --rollouts '%s/big_ids.jsonl' --check-only", g_dir), 0);
    ck_assert_msg(strstr(g_out, "and trainer_logprobs") && strstr(g_out, "OK for both sides as logged"), "%s", g_out);
    /* options that run the model, refused without --model */
    ck_assert_int_eq(run("score -q --rollouts '%s/big_ids.jsonl' --out none --reference fp32", g_dir), 2);
    ck_assert_msg(strstr(g_err, "give --model DIR"), "%s", g_err);
    ck_assert_int_eq(run("score -q --rollouts '%s/big_ids.jsonl' --out none --sweep", g_dir), 2);
    ck_assert_msg(strstr(g_err, "give --model DIR"), "%s", g_err);
    /* a length past every response, refused as with a model */
    ck_assert_int_eq(run("score -q --rollouts '%s/big_ids.jsonl' --out none --len 3", g_dir), 2);
    ck_assert_msg(strstr(g_err, "--len 3 exceeds the 2 tokens"), "%s", g_err);
    /* with --model, its vocabulary applies */
    ck_assert_int_eq(run("score -q --rollouts '%s/big_ids.jsonl' --out none --model ../../models/pythia-rc-tiny",
                         g_dir), 4);
    ck_assert_msg(strstr(g_err, "outside the model's vocabulary"), "%s", g_err);
    /* the default output is named after the file, not the bundled model */
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/src/ratiocheck' score -q --rollouts big_ids.jsonl >/dev/null 2>&1",
             g_dir, RC_TEST_BUILD_DIR);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(p, sizeof p, "%s/big_ids.score.h5", g_dir);
    ck_assert_msg(access(p, F_OK) == 0, "%s", p);
}
END_TEST

/* The three columns when all three agree bit for bit: a file whose sampler
 * and trainer columns are both ratiocheck's own batch-invariant fp32
 * forward (taken from an earlier run's /rollouts/logprob_ratiocheck) */
START_TEST(test_three_agree)
{
    static const char model[] = "--model ../../models/pythia-rc-tiny --trainer dtype=fp32,kernels=invariant";
    ck_assert_int_eq(run("score -q --backend cpu %s --rollouts hf_bf16_trainer_fp32.jsonl --out '%s/a.h5'", model,
                         g_dir), 0);
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/a.h5", g_dir);
    rc_results r;
    ck_assert(rc_h5_read(p, &r) == RC_OK);
    ck_assert(r.threeway != NULL && r.logprob_ratiocheck != NULL);
    ck_assert_int_eq(r.threeway->off, RC_TW_OFF_SAMPLER); /* HF bf16 sampler, HF fp32 trainer */
    char src[PATH_MAX];
    rc_test_source_path(src, sizeof src, "data/fixtures/score/hf_bf16_trainer_fp32.jsonl");
    json_t *rows = load_jsonl(src);
    ck_assert_int_eq((int64_t)json_array_size(rows), r.n_seq);
    snprintf(p, sizeof p, "%s/same.jsonl", g_dir);
    FILE *f = fopen(p, "w");
    ck_assert(f != NULL);
    int64_t tokens = 0;
    for (int64_t q = 0; q < r.n_seq; q++) {
        json_t *o = json_array_get(rows, (size_t)q), *a = json_array(), *b = json_array();
        for (int64_t t = 0; t < r.gen_valid[q]; t++) {
            const float v = r.logprob_ratiocheck[q * r.gen_len + t];
            json_array_append_new(a, json_real(v));
            json_array_append_new(b, json_real(v));
            tokens++;
        }
        json_object_set_new(o, "logprobs", a);
        json_object_set_new(o, "trainer_logprobs", b);
        char *s = json_dumps(o, JSON_COMPACT);
        fprintf(f, "%s\n", s);
        free(s);
    }
    fclose(f);
    json_decref(rows);
    rc_results_free(&r);
    ck_assert_int_eq(run("score -q --backend cpu %s --rollouts '%s/same.jsonl' --json --out none", model, g_dir), 0);
    json_error_t e;
    json_t *j = json_loads(g_out, 0, &e);
    ck_assert_msg(j != NULL, "%s", e.text);
    json_t *tw = json_object_get(j, "three_columns");
    ck_assert(tw != NULL);
    ck_assert_str_eq(json_string_value(json_object_get(tw, "off")), "none");
    const char *sum = json_string_value(json_object_get(tw, "summary"));
    ck_assert_msg(strstr(sum, "both equal ratiocheck's dtype=fp32") && strstr(sum, "bit for bit"), "%s", g_out);
    for (int k = 0; k < RC_TW_N; k++) {
        json_t *pk = json_object_get(tw, rc_threeway_names[k]);
        ck_assert_int_eq(json_integer_value(json_object_get(pk, "count")), tokens);
        ck_assert(json_number_value(json_object_get(pk, "max_abs")) == 0.0);
        ck_assert(json_number_value(json_object_get(pk, "identical_frac")) == 1.0);
    }
    json_decref(j);
    /* the table block */
    ck_assert_int_eq(run("score --backend cpu %s --rollouts '%s/same.jsonl' --out none", model, g_dir), 0);
    ck_assert_msg(strstr(g_out, "three columns:") && strstr(g_out, "sampler vs your trainer") &&
                  strstr(g_out, "your trainer vs ratiocheck") && strstr(g_out, "bit for bit"), "%s", g_out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("score_logged");
    TCase *tc = tcase_create("score_logged");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_hostile);
    tcase_add_test(tc, test_no_model);
    tcase_add_test(tc, test_three_agree);
    suite_add_tcase(s, tc);
    return rc_test_run(s);
}
