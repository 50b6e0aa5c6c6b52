/* test_cli_text.c: test_cli's text prompts, tokenize, --show and report/diff (test_cli.c holds
 * the shared helpers, the run fixture and the suite). */
#include <check.h>
#include <math.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rc_build_config.h"
#include "rc_cuda.h"
#include "testutil.h"
#include "advice.h"
#include "test_cli.h"

/* ---- text prompts, tokenize, --show (the default model and its tokenizer) ---- */

static void write_file(const char *path, const char *body, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(body, 1, n, f), n);
    fclose(f);
}

START_TEST(test_tokenize_command)
{
    ck_assert_int_eq(
        run("tokenize --model data/models/pythia-rc-tiny 'In the beginning God created the heaven and the earth.'"), 0);
    /* HF tokenizers' ids for exactly this string: the "ids" of its line in
     * data/fixtures/tokenizers/pythia_default/expected.jsonl (the same tokenizer) */
    ck_assert_ptr_nonnull(strstr(g_out, "1168 259 2109 387 3337 259 737 268 259 618 14\n"));
    ck_assert_int_eq(run("tokenize --model data/models/pythia-rc-tiny --json 'a<|endoftext|>b'"), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(j, "ids"), 1)), 0); /* the special token */
    json_decref(j);
    ck_assert_int_eq(run("tokenize --model data/fixtures/neox_parallel hello"), 6); /* no tokenizer.json */
    ck_assert_int_eq(count_lines(g_err), 1);
    /* a folder with only tokenizer.json (no config.json) works too; 575 = len(HF
     * Tokenizer.from_file(qwen2_split).encode(default.txt).ids) */
    ck_assert_int_eq(run("tokenize --model data/fixtures/tokenizers/qwen2_split --file data/prompts/default.txt"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "1648 bytes, 575 tokens"));
    ck_assert_int_eq(run("tokenize --model data/models/pythia-rc-tiny"), 2);
}
END_TEST

START_TEST(test_text_prompts)
{
    char p[256], args[2048];
    /* .txt with escapes; the table runs and the HDF5 file holds texts and completions */
    snprintf(p, sizeof p, "%s/p.txt", g_dir);
    write_file(p, "In the beginning\nAnd God said\\n unto\r\n", 38);
    snprintf(args, sizeof args,
             "--model data/models/pythia-rc-tiny --backend cpu --prompts %s --len 4 --samples 1 -q --show 2 --out %s/t.h5", p, g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "[sequence 0] prompt_index 0, sample_index 0, S "));
    ck_assert_ptr_nonnull(strstr(g_out, "\"In the beginning\""));
    ck_assert_ptr_nonnull(strstr(g_out, "[sequence 1] prompt_index 1, sample_index 0, S "));
    ck_assert_ptr_nonnull(strstr(g_out, "\"And God said\\n unto\""));
    /* --show-worst: the largest |S| first; with --json the completions are JSON, nothing else on stdout */
    snprintf(args, sizeof args,
             "--model data/models/pythia-rc-tiny --backend cpu --prompts %s --len 6 --samples 2 -q --show-worst 3 --out none --json", p);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "--json --show-worst is one JSON object: %s", err.text);
    json_t *seqs = json_object_get(json_object_get(j, "completions"), "sequences");
    ck_assert_int_eq((int)json_array_size(seqs), 3);
    for (size_t i = 0; i + 1 < json_array_size(seqs); i++) {
        double a = fabs(json_number_value(json_object_get(json_array_get(seqs, i), "seq_log_ratio_sum")));
        double b = fabs(json_number_value(json_object_get(json_array_get(seqs, i + 1), "seq_log_ratio_sum")));
        ck_assert_msg(a >= b, "worst first: |S| %g then %g", a, b);
    }
    json_t *s0 = json_array_get(seqs, 0);
    ck_assert_int_eq((int)json_array_size(json_object_get(s0, "tokens")), 6);
    ck_assert_int_eq((int)json_array_size(json_object_get(s0, "log_ratio")), 6);
    json_decref(j);
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --backend cpu --prompts %s --len 4 -q --show 1 --show-worst 1", p);
    ck_assert_int_eq(run(args), 2);
    /* .jsonl: text and token-id prompts */
    snprintf(p, sizeof p, "%s/p.jsonl", g_dir);
    const char *jl = "{\"prompt\": \"In the beginning\"}\n\n{\"tokens\": [1168, 259]}\n";
    write_file(p, jl, strlen(jl));
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --backend cpu --prompts %s --len 4 --samples 1 -q --out none --json", p);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "\"count\": 8"));
    /* errors name the file and line (and byte) */
    struct {
        const char *name, *body;
        size_t n;
        int code;
        const char *msg;
    } bad[] = {
        {"u.txt", "fine\nbad \xff byte\n", 16, 4, "u.txt:2: invalid UTF-8 at byte 5"},
        {"e.txt", "fine\n\nmore\n", 11, 4, "e.txt:2: empty prompt"},
        {"j.jsonl", "{\"prompt\": \"ok\"}\n{\"text\": 1}\n", 30, 4, "j.jsonl:2: expected"},
        {"k.jsonl", "{\"prompt\": \"ok\"}\n{not json\n", 27, 4, "line 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, bad[i].name);
        write_file(p, bad[i].body, bad[i].n);
        snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --backend cpu --prompts %s --len 4 -q --out none", p);
        ck_assert_int_eq(run(args), bad[i].code);
        ck_assert_msg(strstr(g_err, bad[i].msg) != NULL, "%s: '%s'", bad[i].name, g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
    }
    /* a prompt that does not fit the context with max(--len): its line */
    snprintf(p, sizeof p, "%s/long.txt", g_dir);
    write_file(p, "short\nIn the beginning God created\n", 35);
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --backend cpu --prompts %s --len 10,252 -q --out none", p);
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "long.txt:2: prompt of 5 tokens plus 252 generated tokens"));
}
END_TEST

/* report reprints the run's output from the file; diff compares two runs
 * over the same tokens; --rollouts-from replays a run's tokens */
START_TEST(test_report_diff)
{
    char args[2048], a[256], b[256], c[256];
    static char first[1 << 16];
    snprintf(a, sizeof a, "%s/a.h5", g_dir);
    snprintf(b, sizeof b, "%s/b.h5", g_dir);
    snprintf(c, sizeof c, "%s/c.h5", g_dir);
    const char *m = "--model data/models/pythia-rc-tiny --backend cpu --num-prompts 4 --samples 2 --len 6,12 -q";
    for (int json = 0; json < 2; json++) {
        snprintf(args, sizeof args, "%s --out %s --force%s", m, a, json ? " --json" : "");
        ck_assert_int_eq(run(args), 0);
        memcpy(first, g_out, sizeof first);
        snprintf(args, sizeof args, "report %s%s", a, json ? " --json" : "");
        ck_assert_int_eq(run(args), 0);
        ck_assert_str_eq(g_out, first); /* byte for byte the run's own output */
    }
    /* a replay with the same settings reproduces every log-prob: diff is 0 */
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --backend cpu --len 6,12 -q --out %s --rollouts-from %s", b, a);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "diff %s %s --json", a, b);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert(json_real_value(json_object_get(json_object_get(j, "generation"), "max_abs")) == 0.0 ||
              json_integer_value(json_object_get(json_object_get(j, "generation"), "max_abs")) == 0);
    ck_assert(json_number_value(json_object_get(json_object_get(j, "generation"), "identical_frac")) == 1.0);
    json_t *lens = json_object_get(j, "lens");
    ck_assert_int_eq(json_array_size(lens), 2);
    for (size_t i = 0; i < 2; i++) {
        ck_assert(json_number_value(json_object_get(json_array_get(lens, i), "forward_max_abs")) == 0.0);
        ck_assert(json_number_value(json_object_get(json_array_get(lens, i), "forward_identical_frac")) == 1.0);
    }
    json_decref(j);
    /* a file against itself: zero everywhere (table) */
    snprintf(args, sizeof args, "diff %s %s", a, a);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "max |diff| 0.000e+00, mean |diff| 0.000e+00, bitwise equal 1.0000"));
    /* replaying in fp16 compares dtypes over the same tokens */
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --backend cpu --len 6,12 -q --dtype fp16 --out %s --rollouts-from %s",
             c, a);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "diff %s %s", a, c);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "B "));
    ck_assert_ptr_nonnull(strstr(g_out, "fp16"));
    /* runs over different tokens: a clear error */
    snprintf(args, sizeof args, "%s --seed 5 --out %s --force", m, b);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "diff %s %s", a, b);
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "not runs over the same tokens"));
    ck_assert_int_eq(count_lines(g_err), 1);
    /* not a result file; missing file */
    snprintf(args, sizeof args, "report %s/p.ids", g_dir);
    ck_assert_int_eq(run(args), 4);
    ck_assert_ptr_nonnull(strstr(g_err, "not an HDF5 file"));
    snprintf(args, sizeof args, "report %s/missing.h5", g_dir);
    ck_assert_int_eq(run(args), 6);
    /* --len beyond the replayed rollouts */
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --backend cpu --len 20 -q --out none --rollouts-from %s", a);
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "exceeds the 12 tokens of the replayed rollouts"));
}
END_TEST

void text_tests_in_run(TCase *tc)
{
    tcase_add_test(tc, test_tokenize_command);
    tcase_add_test(tc, test_text_prompts);
}

void text_tests_in_run_2(TCase *tc)
{
    tcase_add_test(tc, test_report_diff);
}
