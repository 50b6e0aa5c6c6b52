/* The ratiocheck executable: help, version, inspect, usage errors and exit
 * codes (README's table), one-line error messages. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rc_cuda.h"
#include "testutil.h"

static char g_out[1 << 16], g_err[1 << 16];

static void slurp(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(buf, 1, n - 1, f) : 0;
    buf[got] = '\0';
    if (f)
        fclose(f);
}

/* Run `ratiocheck ARGS` (a shell-quoted string); return the exit code. */
static int run(const char *args)
{
    char tmpl_o[] = "/tmp/rc_cli_outXXXXXX", tmpl_e[] = "/tmp/rc_cli_errXXXXXX";
    int fo = mkstemp(tmpl_o), fe = mkstemp(tmpl_e);
    ck_assert(fo >= 0 && fe >= 0);
    close(fo);
    close(fe);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/src/ratiocheck' %s >'%s' 2>'%s' </dev/null",
             getenv("RC_SOURCE_DIR"), RC_TEST_BUILD_DIR, args, tmpl_o, tmpl_e);
    int st = system(cmd);
    slurp(tmpl_o, g_out, sizeof g_out);
    slurp(tmpl_e, g_err, sizeof g_err);
    unlink(tmpl_o);
    unlink(tmpl_e);
    ck_assert_msg(WIFEXITED(st), "ratiocheck %s did not exit normally", args);
    return WEXITSTATUS(st);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

START_TEST(test_help_version)
{
    ck_assert_int_eq(run("--help"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "Usage: ratiocheck"));
    ck_assert_ptr_nonnull(strstr(g_out, "Exit codes"));
    ck_assert_int_eq(run("--version"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "ratiocheck 0."));
}
END_TEST

START_TEST(test_usage_errors)
{
    ck_assert_int_eq(run("--frobnicate"), 2);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_ptr_nonnull(strstr(g_err, "--frobnicate"));
    ck_assert_int_eq(run("frobnicate"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "unknown command 'frobnicate'"));
    ck_assert_int_eq(run("inspect"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "--model"));
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_int_eq(run("inspect --model"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "needs a value"));
    ck_assert_int_eq(run("inspect --model data/fixtures/neox_parallel extra"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "unexpected argument 'extra'"));
}
END_TEST

START_TEST(test_inspect)
{
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "architecture   llama"));
    ck_assert_ptr_nonnull(strstr(g_out, "kv heads       2"));
    ck_assert_ptr_nonnull(strstr(g_out, "heads          4"));
    ck_assert_ptr_nonnull(strstr(g_out, "stored dtype   F32"));
    ck_assert_ptr_nonnull(strstr(g_out, "llama3"));
    ck_assert_int_eq(run("inspect --model data/fixtures/neox_bf16 --json"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "\"stored_dtype\": \"BF16\""));
    ck_assert_ptr_nonnull(strstr(g_out, "\"model_type\": \"gpt_neox\""));
    ck_assert_int_eq(run("inspect --model data/fixtures/qwen2_bias"), 0); /* sharded */
    ck_assert_ptr_nonnull(strstr(g_out, "architecture   qwen2"));
}
END_TEST

START_TEST(test_inspect_errors)
{
    /* missing folder: I/O error (6), one line naming the path */
    ck_assert_int_eq(run("inspect --model /nonexistent/model"), 6);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_ptr_nonnull(strstr(g_err, "/nonexistent/model/config.json"));
    /* malformed config: 4; unsupported model type: 5 */
    char dir[] = "/tmp/rc_cli_modelXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[512], args[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"model_type\": \"llama\", \"hidden_size\": ", f);
    fclose(f);
    snprintf(args, sizeof args, "inspect --model %s", dir);
    ck_assert_int_eq(run(args), 4);
    ck_assert_ptr_nonnull(strstr(g_err, "config.json"));
    ck_assert_int_eq(count_lines(g_err), 1);
    f = fopen(path, "w");
    fputs("{\"model_type\": \"gpt2\"}", f);
    fclose(f);
    ck_assert_int_eq(run(args), 5);
    ck_assert_ptr_nonnull(strstr(g_err, "\"gpt2\" is not supported"));
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ---- the run command, on a fixture model with a prompt file of our own ---- */

static char g_dir[64];
static char g_common[1024];

static void run_setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/rc_cli_runXXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
    char p[128];
    snprintf(p, sizeof p, "%s/p.ids", g_dir);
    FILE *f = fopen(p, "w");
    fputs("# three prompts\n1 2 3 4 5\n\n10 20 30\n7 8 9 10 11 12 13\n", f);
    fclose(f);
    snprintf(g_common, sizeof g_common,
             "--model data/fixtures/neox_parallel --prompts %s/p.ids --len 4,8 --samples 2 -q", g_dir);
}

static void run_teardown(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static int count_files(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    ck_assert(fscanf(p, "%d", &n) == 1);
    pclose(p);
    return n;
}

START_TEST(test_run_json)
{
    char args[2048];
    snprintf(args, sizeof args, "%s --dtype fp16 --json --out %s/r.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "JSON does not parse: %s: %s", err.text, g_out);
    ck_assert_str_eq(json_string_value(json_object_get(j, "dtype")), "fp16");
    ck_assert_str_eq(json_string_value(json_object_get(j, "kernels")), "engine");
    ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "data/fixtures/neox_parallel");
    json_t *lens = json_object_get(j, "lens");
    ck_assert_int_eq(json_array_size(lens), 2);
    const char *keys[] = {"len", "count", "mean", "std", "min", "max", "k1", "k3", "clipfrac", "identical_frac",
                          "first_divergent_position"};
    for (size_t i = 0; i < 2; i++)
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            ck_assert_msg(json_object_get(json_array_get(lens, i), keys[k]) != NULL, "lens[%zu] lacks %s", i, keys[k]);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(lens, 1), "len")), 8);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(lens, 1), "count")), 3 * 2 * 8);
    json_decref(j);
    /* the table: one line per length, and the output path */
    snprintf(args, sizeof args, "%s --out none", g_common);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "clipfrac"));
    ck_assert_ptr_nonnull(strstr(g_out, "\n    8       48 "));
}
END_TEST

START_TEST(test_run_gates)
{
    char args[2048];
    /* invariant kernels: every log-prob identical, any limit holds */
    snprintf(args, sizeof args, "%s --kernels invariant --out none --fail-above nonidentical_frac=0,std=0,clipfrac=0",
             g_common);
    ck_assert_int_eq(run(args), 0);
    /* fp16 engine kernels drift: std > 0 fails the gate with exit 3 */
    snprintf(args, sizeof args, "%s --dtype fp16 --out %s/g.h5 --fail-above std=0", g_common, g_dir);
    ck_assert_int_eq(run(args), 3);
    ck_assert_ptr_nonnull(strstr(g_err, "std = "));
    ck_assert_ptr_nonnull(strstr(g_out, "clipfrac")); /* results still printed */
    char p[128];
    snprintf(p, sizeof p, "%s/g.h5", g_dir);
    ck_assert_int_eq(access(p, F_OK), 0); /* and written */
    snprintf(args, sizeof args, "%s --out none --fail-above std=1", g_common);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "%s --out none --fail-above bogus=1", g_common);
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "unknown metric 'bogus'"));
    snprintf(args, sizeof args, "%s --out none --fail-above std", g_common);
    ck_assert_int_eq(run(args), 2);
}
END_TEST

START_TEST(test_run_output_file)
{
    char args[2048], p[256];
    snprintf(p, sizeof p, "%s/o.h5", g_dir);
    snprintf(args, sizeof args, "%s --out %s", g_common, p);
    ck_assert_int_eq(run(args), 0);
    struct stat a, b;
    ck_assert_int_eq(stat(p, &a), 0);
    /* no overwrite without --force: exit 2, file untouched */
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "exists (use --force"));
    ck_assert_int_eq(stat(p, &b), 0);
    ck_assert(a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec && a.st_ino == b.st_ino);
    snprintf(args, sizeof args, "%s --out %s --force", g_common, p);
    ck_assert_int_eq(run(args), 0);
    /* induced failure after the temporary file exists: the output path is a
     * folder, so the final rename fails: exit 6, nothing left behind */
    char sub[128];
    snprintf(sub, sizeof sub, "%s/sub", g_dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    snprintf(p, sizeof p, "%s/x", sub);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    FILE *f = fopen(strcat(strcpy((char[256]){0}, p), "/keep"), "w");
    fclose(f);
    snprintf(args, sizeof args, "%s --out %s --force", g_common, p);
    ck_assert_int_eq(run(args), 6);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_int_eq(count_files(sub), 1); /* only x/ itself: no temporary file */
    /* a failure before writing (prompt id outside the vocabulary): exit 4,
     * one line naming the prompt file, no output */
    snprintf(p, sizeof p, "%s/bad.ids", g_dir);
    f = fopen(p, "w");
    fputs("1 2 3\n4 99999\n", f);
    fclose(f);
    snprintf(args, sizeof args, "--model data/fixtures/neox_parallel --prompts %s --out %s/never.h5 -q", p, g_dir);
    ck_assert_int_eq(run(args), 4);
    ck_assert_ptr_nonnull(strstr(g_err, "bad.ids: prompt 2: token id 99999"));
    snprintf(p, sizeof p, "%s/never.h5", g_dir);
    ck_assert_int_ne(access(p, F_OK), 0);
}
END_TEST

START_TEST(test_run_bad_options)
{
    char args[2048];
    const struct {
        const char *opt, *msg;
    } cases[] = {
        {"--dtype fp8", "--dtype: 'fp8'"},
        {"--len 20,x", "--len"},
        {"--len 0", "--len"},
        {"--len 8,8", "listed twice"},
        {"--kernels fast", "--kernels: 'fast'"},
        {"--upcast softmax,qk", "unknown op 'qk'"},
        {"--top-p 1.5", "--top-p"},
        {"--temperature 0", "--temperature"},
        {"--samples -1", "--samples"},
        {"--reference fp16", "--reference: 'fp16'"},
        {"--logprob-dtype bf16", "--logprob-dtype"},
        {"--backend gpu", "--backend: 'gpu'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, "%s --out none %s", g_common, cases[i].opt);
        ck_assert_int_eq(run(args), 2);
        ck_assert_msg(strstr(g_err, cases[i].msg) != NULL, "%s: stderr '%s'", cases[i].opt, g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
    }
    /* a prompt file that is not token ids: exit 4 naming file, line, column */
    char p[128];
    snprintf(p, sizeof p, "%s/text.ids", g_dir);
    FILE *f = fopen(p, "w");
    fputs("1 2\nhello world\n", f);
    fclose(f);
    snprintf(args, sizeof args, "--model data/fixtures/neox_parallel --prompts %s --out none", p);
    ck_assert_int_eq(run(args), 4);
    ck_assert_ptr_nonnull(strstr(g_err, "text.ids:2:1: expected a token id"));
    /* --backend cuda never falls back silently: exit 8 with the reason (on
     * this machine: no device, or an empty CUDA_VISIBLE_DEVICES) */
    snprintf(args, sizeof args, "%s --out none --backend cuda", g_common);
    ck_assert_int_eq(run(args), 8);
    ck_assert_ptr_nonnull(strstr(g_err, "CUDA backend: "));
    ck_assert_int_eq(count_lines(g_err), 1);
    snprintf(args, sizeof args, "%s --out none --backend cpu", g_common);
    ck_assert_int_eq(run(args), 0);
    /* auto: cuda only when a device answers; the JSON says which ran */
    int nd;
    char dev[256];
    bool have_gpu = rc_cuda_probe(&nd, dev, sizeof dev) == RC_OK;
    snprintf(args, sizeof args, "%s --out none --backend auto --json", g_common);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, have_gpu ? "\"backend\": \"cuda\"" : "\"backend\": \"cpu\", \"device\": \"\""));
    /* blas is OpenBLAS: never on the GPU */
    snprintf(args, sizeof args, "%s --out none --backend cuda --kernels blas", g_common);
    ck_assert_int_eq(run(args), have_gpu ? 2 : 8);
    ck_assert_int_eq(count_lines(g_err), 1);
    /* more positions than the model has */
    snprintf(args, sizeof args, "%s --out none --len 100", g_common);
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "exceeds the model's 64 positions"));
}
END_TEST

/* SIGINT: exit 130 and no file at the output path */
START_TEST(test_run_interrupt)
{
    char cmd[4096], p[128];
    snprintf(p, sizeof p, "%s/int.h5", g_dir);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && ('%s/src/ratiocheck' --model data/fixtures/neox_parallel --prompts %s/p.ids --len 50 "
             "--samples 5000 --batch 4 -q --out %s & pid=$!; sleep 1; kill -INT $pid; wait $pid; echo $? > %s/code)",
             getenv("RC_SOURCE_DIR"), RC_TEST_BUILD_DIR, g_dir, p, g_dir);
    ck_assert_int_ne(system(cmd), -1);
    char cp[128];
    snprintf(cp, sizeof cp, "%s/code", g_dir);
    slurp(cp, g_out, sizeof g_out);
    ck_assert_int_eq(atoi(g_out), 130);
    ck_assert_int_ne(access(p, F_OK), 0);
    unlink(cp);
    ck_assert_int_eq(count_files(g_dir), 1); /* p.ids only */
}
END_TEST

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
             "--model data/models/pythia-rc-tiny --prompts %s --len 4 --samples 1 -q --show 2 --out %s/t.h5", p, g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "[0] prompt 1, sample 0: \"In the beginning\""));
    ck_assert_ptr_nonnull(strstr(g_out, "[1] prompt 2, sample 0: \"And God said\\n unto\""));
    /* .jsonl: text and token-id prompts */
    snprintf(p, sizeof p, "%s/p.jsonl", g_dir);
    const char *jl = "{\"prompt\": \"In the beginning\"}\n\n{\"tokens\": [1168, 259]}\n";
    write_file(p, jl, strlen(jl));
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --prompts %s --len 4 --samples 1 -q --out none --json", p);
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
        snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --prompts %s --len 4 -q --out none", p);
        ck_assert_int_eq(run(args), bad[i].code);
        ck_assert_msg(strstr(g_err, bad[i].msg) != NULL, "%s: '%s'", bad[i].name, g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
    }
    /* a prompt that does not fit the context with max(--len): its line */
    snprintf(p, sizeof p, "%s/long.txt", g_dir);
    write_file(p, "short\nIn the beginning God created\n", 35);
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --prompts %s --len 10,252 -q --out none", p);
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
    const char *m = "--model data/models/pythia-rc-tiny --num-prompts 4 --samples 2 --len 6,12 -q";
    for (int json = 0; json < 2; json++) {
        snprintf(args, sizeof args, "%s --out %s --force%s", m, a, json ? " --json" : "");
        ck_assert_int_eq(run(args), 0);
        memcpy(first, g_out, sizeof first);
        snprintf(args, sizeof args, "report %s%s", a, json ? " --json" : "");
        ck_assert_int_eq(run(args), 0);
        ck_assert_str_eq(g_out, first); /* byte for byte the run's own output */
    }
    /* a replay with the same settings reproduces every log-prob: diff is 0 */
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --len 6,12 -q --out %s --rollouts-from %s", b, a);
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
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --len 6,12 -q --dtype fp16 --out %s --rollouts-from %s",
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
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --len 20 -q --out none --rollouts-from %s", a);
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "exceeds the 12 tokens of the replayed rollouts"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_help_version);
    tcase_add_test(tc, test_usage_errors);
    tcase_add_test(tc, test_inspect);
    tcase_add_test(tc, test_inspect_errors);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("run");
    tcase_add_checked_fixture(tr, run_setup, run_teardown);
    tcase_set_timeout(tr, 120);
    tcase_add_test(tr, test_run_json);
    tcase_add_test(tr, test_run_gates);
    tcase_add_test(tr, test_run_output_file);
    tcase_add_test(tr, test_run_bad_options);
    tcase_add_test(tr, test_run_interrupt);
    tcase_add_test(tr, test_tokenize_command);
    tcase_add_test(tr, test_text_prompts);
    tcase_add_test(tr, test_report_diff);
    suite_add_tcase(s, tr);
    return rc_test_run(s);
}
