/* The ratiocheck executable: help, version, inspect, usage errors and exit
 * codes (README's table), one-line error messages. */
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
#include "gate_check.h"
#include "advice.h"
#include "test_cli.h"

char g_out[1 << 16], g_err[1 << 16];

/* Run `ratiocheck ARGS` (a shell-quoted string); return the exit code. */
int run(const char *args)
{
    return rc_test_run_cli("", args, g_out, sizeof g_out, g_err, sizeof g_err);
}

int count_lines(const char *s)
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
    /* the new families say how positions enter */
    ck_assert_int_eq(run("inspect --model data/fixtures/mpt_alibi"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "positions      ALiBi, MPT slopes, bias from the last key, added in fp32"));
    ck_assert_ptr_nonnull(strstr(g_out, "clip_qkv       1.5"));
    ck_assert_ptr_null(strstr(g_out, "rope "));
    ck_assert_int_eq(run("inspect --model data/fixtures/gpt2_learned"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "positions      learned, 64"));
    /* the memory a run allocates: the engine's weight copies (none in fp32 on the CPU: the
     * checkpoint's fp32 weights are used in place), KV cache 2 x layers x slots x kv_heads x
     * tokens x head_dim elements of the dtype, activations */
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --json --dtype fp32 --batch 8 --seqs 4 --tokens 100"),
                     0);
    ck_assert_ptr_nonnull(strstr(g_out, "\"weights_copy_bytes\": 0, \"kv_cache_bytes\": 614400,"));
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --json --dtype bf16 --batch 8 --seqs 4 --tokens 100"),
                     0);
    /* bf16 over this fp32 checkpoint: the model's fused QKV (q, k, v appended at load: 3 layers of
     * 128 x 64) rounded to bf16 at 2 bytes (rc_model_narrow, as a run does): 49,152 bytes, used in
     * place by the engine; the other GEMM weights copied at 2 bytes (embed 256 x 64, per layer
     * o 64 x 64, up, gate 128 x 64, down 64 x 128: 102,400 elements, each field a multiple of 64
     * bytes), the norm weights as fp32 (7 x 64): 206,592 bytes; the KV cache at 2 bytes: half of
     * fp32's. (Before the narrowing: the model's fp32 QKV 98,304 bytes + 255,744 copied.) */
    ck_assert_ptr_nonnull(strstr(g_out, "\"model_bytes\": 49152, \"weights_copy_bytes\": 206592, "
                                        "\"kv_cache_bytes\": 307200,"));
    /* the same run on one GPU: every weight copied to the device, the fused QKV too (49,152 + 206,592
     * bytes), the KV cache at 2 bytes as on the CPU */
    ck_assert_ptr_nonnull(strstr(g_out, "\"device_memory\": {\"gpus\": 1, \"per_gpu_bytes\": "));
    ck_assert_ptr_nonnull(strstr(g_out, "\"weights_bytes\": 255744, \"kv_cache_bytes\": 307200,"));
    /* --gpus 3: a layer on each GPU; GPU 0 also holds the embedding and the final norm (256 x 64 x 2 + 64 x 4
     * bytes = 33,024), each layer 74,240 bytes ((255,744 - 33,024) / 3) and a third of the KV cache */
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --json --dtype bf16 --batch 8 --seqs 4 --tokens 100 "
                         "--gpus 3"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "\"device_memory\": {\"gpus\": 3, \"per_gpu_bytes\": "));
    ck_assert_ptr_nonnull(strstr(g_out, "\"split\": [{\"layers\": 1, \"bytes\": "));
    ck_assert_ptr_nonnull(strstr(g_out, "\"weights_bytes\": 107264, \"kv_cache_bytes\": 102400}, {\"layers\": 1, "));
    ck_assert_ptr_nonnull(strstr(g_out, "\"weights_bytes\": 74240, \"kv_cache_bytes\": 102400}]}"));
    /* --gpus 2, even by weight bytes: the boundary nearest 255,744 / 2 is after layer 0 (GPU 0 107,264 bytes,
     * against 181,504 after layer 1) */
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --dtype bf16 --gpus 2 --no-speed"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "GPU 0: layers 0-0,"));
    ck_assert_ptr_nonnull(strstr(g_out, "GPU 1: layers 1-2,"));
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --gpus 2 --layer-split 2,2"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "--layer-split: 4 layers in all, but the model runs 3"));
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --gpus 4"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "--gpus 4: the model runs 3 layers"));
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --dtype fp8"), 2);
    ck_assert_int_eq(run("inspect --model data/fixtures/baichuan2_13b --json"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "\"positions\": \"alibi\", \"norm_head\": true"));
    /* the speed estimate: GEMM FLOPs per token (2 x the GEMM weights), timed rates > 0; --no-speed omits it */
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --json"), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "inspect --json: %s", err.text);
    json_t *sp = json_object_get(j, "speed");
    ck_assert_ptr_nonnull(sp);
    const double H = 64, qkv = (4 + 2 * 2) * 16, I = 128, L = 3, V = 256;
    ck_assert_int_eq((int)json_integer_value(json_object_get(j, "hidden")), 64);
    ck_assert_int_eq((int)json_integer_value(json_object_get(j, "intermediate")), 128);
    ck_assert_int_eq((int)json_integer_value(json_object_get(j, "layers")), 3);
    ck_assert_int_eq((int)json_integer_value(json_object_get(j, "vocab")), 256);
    ck_assert_double_eq_tol(json_real_value(json_object_get(sp, "gemm_gflop_per_token")),
                            2.0 * (L * (H * qkv + 64 * H + 3 * H * I) + V * H) / 1e9, 1e-12);
    ck_assert(json_real_value(json_object_get(sp, "decode_gflops")) > 0);
    ck_assert(json_real_value(json_object_get(sp, "forward_s_per_1k_tokens")) > 0);
    json_decref(j);
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --json --no-speed"), 0);
    ck_assert_ptr_null(strstr(g_out, "\"speed\""));
}
END_TEST


/* inspect --weights: the sampler's fp8 copies in the GPU estimate, each layer's on its GPU.
 * --weights as-stored on the DeepSeek-V3 FP8 checkpoint and --weights fp8 (and W8A16, with --sampler's keys
 * fp8,weight-scale=channel,act=none) on llama_gqa, --gpus 2 with the split 1,2: the two GPUs' weights add up to
 * the one-GPU estimate's, and each GPU's weights exceed the plain run's on the same split (its layers' copies
 * are its own, not all on GPU 0); refused by name (exit 2): as-stored on a checkpoint that is not FP8, fp8 in
 * fp32, a key that is not --sampler's */
static void inspect_weights_json(const char *args, int64_t *one, int64_t split[2])
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "inspect --json --no-speed --dtype bf16 %s", args);
    ck_assert_msg(run(cmd) == 0, "%s: %s", cmd, g_err);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", cmd, err.text);
    json_t *dm = json_object_get(j, "device_memory"), *sp = json_object_get(dm, "split");
    ck_assert(dm && json_array_size(sp) == 2);
    *one = json_integer_value(json_object_get(dm, "weights_bytes"));
    for (size_t d = 0; d < 2; d++)
        split[d] = json_integer_value(json_object_get(json_array_get(sp, d), "weights_bytes"));
    json_decref(j);
}

START_TEST(test_inspect_fp8_split)
{
    static const char *const cases[][2] = {{"data/fixtures/moe_fp8/deepseek_v3_fp8", "as-stored"},
                                           {"data/fixtures/llama_gqa", "fp8"},
                                           {"data/fixtures/llama_gqa", "fp8,weight-scale=channel,act=none"}};
    for (size_t i = 0; i < 3; i++) {
        char args[512], key[128];
        int64_t one8, sp8[2], one0, sp0[2];
        snprintf(args, sizeof args, "--model %s --gpus 2 --layer-split 1,2 --weights %s", cases[i][0], cases[i][1]);
        inspect_weights_json(args, &one8, sp8);
        snprintf(key, sizeof key, "\"weights\": \"%s\"", cases[i][1]);
        ck_assert_ptr_nonnull(strstr(g_out, key));
        snprintf(args, sizeof args, "--model %s --gpus 2 --layer-split 1,2", cases[i][0]);
        inspect_weights_json(args, &one0, sp0);
        printf("inspect --weights %s %s --gpus 2 (1,2): GPU weights %lld + %lld bytes (plain %lld + %lld), one GPU "
               "%lld\n", cases[i][1], cases[i][0], (long long)sp8[0], (long long)sp8[1], (long long)sp0[0],
               (long long)sp0[1], (long long)one8);
        ck_assert_int_eq(sp8[0] + sp8[1], one8);
        ck_assert(one8 > one0);
        ck_assert(sp8[0] > sp0[0] && sp8[1] > sp0[1]);
    }
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --weights as-stored --no-speed"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "is not an FP8 checkpoint"));
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --weights fp8 --dtype fp32 --no-speed"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "weights=fp8 needs dtype=bf16 or fp16"));
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --weights int4 --no-speed"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "--weights int4: dtype, fp8 or as-stored"));
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa --weights fp8,act=half --no-speed"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "--weights fp8,act=half: after fp8, weight-scale="));
}
END_TEST

/* Every command's --help comes from its option table: the usage line, then
 * each option with its help text; an unknown option is exit 2 */
START_TEST(test_command_help_tables)
{
    const char *const cmds[][3] = {{"inspect --help", "Usage: ratiocheck inspect", "  -m, --model DIR"},
                                   {"tokenize --help", "Usage: ratiocheck tokenize", "  --file FILE"},
                                   {"report --help", "Usage: ratiocheck report", "  --json "},
                                   {"diff --help", "Usage: ratiocheck diff", "  -h, --help"},
                                   {"run --help", "Usage: ratiocheck [run]", "  --alibi-bias model|rowmax"}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        ck_assert_int_eq(run(cmds[i][0]), 0);
        ck_assert_msg(strstr(g_out, cmds[i][1]) == g_out, "%s: '%s'", cmds[i][0], g_out);
        ck_assert_msg(strstr(g_out, cmds[i][2]) != NULL, "%s: '%s'", cmds[i][0], g_out);
    }
    ck_assert_int_eq(run("report --bogus"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "unknown option --bogus"));
    ck_assert_int_eq(run("tokenize --model"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "needs a value"));
}
END_TEST

START_TEST(test_inspect_errors)
{
    /* missing folder: I/O error (6), one line naming the path */
    ck_assert_int_eq(run("inspect --model /nonexistent/model"), 6);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_ptr_nonnull(strstr(g_err, "/nonexistent/model: No such file or directory"));
    ck_assert_ptr_null(strstr(g_err, "Hub"));
    /* "org/name" that is not a folder: the Hub hint, for run, inspect and tokenize */
    const char *hub_cmds[] = {"inspect --model HuggingFaceTB/SmolLM2-135M-Instruct",
                              "--model HuggingFaceTB/SmolLM2-135M-Instruct -q --out none",
                              "tokenize --model HuggingFaceTB/SmolLM2-135M-Instruct hello"};
    for (size_t i = 0; i < sizeof hub_cmds / sizeof *hub_cmds; i++) {
        ck_assert_int_eq(run(hub_cmds[i]), 6);
        ck_assert_int_eq(count_lines(g_err), 1);
        ck_assert_msg(strstr(g_err, "HuggingFaceTB/SmolLM2-135M-Instruct: no such folder; this looks like a "
                                    "Hugging Face Hub id") &&
                          strstr(g_err, "hf download HuggingFaceTB/SmolLM2-135M-Instruct --local-dir DIR"),
                      "%s: '%s'", hub_cmds[i], g_err);
    }
    /* a file instead of a folder: usage error */
    ck_assert_int_eq(run("inspect --model /etc/hostname"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "/etc/hostname: not a folder"));
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
    fputs("{\"model_type\": \"gptj\"}", f);
    fclose(f);
    ck_assert_int_eq(run(args), 5);
    ck_assert_ptr_nonnull(strstr(g_err, "\"gptj\" is not supported"));
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ---- the run command, on a fixture model with a prompt file of our own ---- */

char g_dir[64];
char g_common[1024];

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
             "--model data/fixtures/neox_parallel --backend cpu --prompts %s/p.ids --len 4,8 --samples 2 -q", g_dir);
}

static void run_teardown(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

int count_files(const char *dir)
{
    char cmd[512];
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
                          "first_divergent_position", "token_tis_clipfrac", "icepop_maskfrac",
                          "prime_legacy_maskfrac", "seq_geo_rs_maskfrac", "chi2_seq", "max_abs_log_ratio"};
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
    /* the corrections block (README "Corrections"): one row per correction */
    ck_assert_ptr_nonnull(strstr(g_out, "\ncorrections at step 0: "));
    ck_assert_ptr_nonnull(strstr(g_out, "\n  IcePop (verl preset)           r outside [0.5, 5]"));
}
END_TEST

/* --clip-eps*, --seq-eps, --seq-cap: stored as settings, used by the
 * statistics, and the file's own values used again by `report` */
/* Run `args`, check the table holds every needle, then `report` of the file it
 * wrote (with report_extra) must print that table byte for byte; the table
 * stays in g_out. */
static void check_table_reported(const char *args, const char *h5, const char *report_extra,
                                 const char *const *needles, size_t n)
{
    static char first[1 << 16];
    char rargs[1024];
    ck_assert_int_eq(run(args), 0);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(strstr(g_out, needles[i]) != NULL, "no '%s' in the table", needles[i]);
    memcpy(first, g_out, sizeof first);
    snprintf(rargs, sizeof rargs, "report %s%s", h5, report_extra);
    ck_assert_int_eq(run(rargs), 0);
    ck_assert_str_eq(g_out, first);
}

START_TEST(test_stat_options)
{
    char args[2048];
    const char *opts = "--clip-eps 0.001 --clip-eps-high 0.0015 --seq-eps 1e-4 --seq-cap 1.002";
    snprintf(args, sizeof args, "%s --dtype fp16 %s --json --out %s/s.h5", g_common, opts, g_dir);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert(json_number_value(json_object_get(j, "clip_eps_low")) == 0.001);
    ck_assert(json_number_value(json_object_get(j, "clip_eps_high")) == 0.0015);
    ck_assert(json_number_value(json_object_get(j, "seq_eps")) == 1e-4);
    ck_assert(json_number_value(json_object_get(j, "seq_cap")) == 1.002);
    const json_t *l0 = json_array_get(json_object_get(j, "lens"), 0);
    const char *keys[] = {"seq_count", "seq_log_ratio_sum_mean", "seq_log_ratio_sum_std", "seq_log_ratio_mean_max",
                          "seq_ratio_min", "seq_ratio_max", "seq_frac_outside_band", "seq_frac_above_cap"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        ck_assert_msg(json_object_get(l0, keys[k]) != NULL, "lens[0] lacks %s", keys[k]);
    ck_assert_int_eq(json_integer_value(json_object_get(l0, "seq_count")), 6);
    json_decref(j);
    /* the table names the clip range and the sequence thresholds; report recomputes it
     * with the file's thresholds */
    snprintf(args, sizeof args, "%s --dtype fp16 %s --out %s/s.h5 --force", g_common, opts, g_dir);
    char h5[256];
    snprintf(h5, sizeof h5, "%s/s.h5", g_dir);
    const char *const needles[] = {"clipfrac: ratio outside [0.999, 1.0015]", "|e^M-1|>0.0001", "e^S>1.002"};
    check_table_reported(args, h5, "", needles, sizeof needles / sizeof needles[0]);
    /* defaults */
    snprintf(args, sizeof args, "%s --out none", g_common);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "clipfrac: ratio outside [0.8, 1.2]"));
    ck_assert_ptr_nonnull(strstr(g_out, "|e^M-1|>0.0003"));
    /* bad values: usage errors naming the option */
    const struct {
        const char *opt, *msg;
    } bad[] = {{"--clip-eps 1", "lower clip bound"},     {"--clip-eps-low 1", "--clip-eps-low"},
               {"--clip-eps 0", "--clip-eps"},           {"--seq-cap 0.5", "--seq-cap"},
               {"--seq-eps -1", "--seq-eps"},            {"--clip-eps-high nan", "--clip-eps-high"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "%s --out none %s", g_common, bad[i].opt);
        ck_assert_msg(run(args) == 2, "%s", bad[i].opt);
        ck_assert_msg(strstr(g_err, bad[i].msg) != NULL, "%s: '%s'", bad[i].opt, g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
    }
}
END_TEST

/* diff A B --json: generation max |diff| and the forward max |diff| at every length */
static void diff_max(const char *a, const char *b, double *gen, double *fwd)
{
    char args[1024];
    snprintf(args, sizeof args, "diff %s/%s %s/%s --json", g_dir, a, g_dir, b);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    *gen = json_number_value(json_object_get(json_object_get(j, "generation"), "max_abs"));
    *fwd = 0;
    const json_t *lens = json_object_get(j, "lens");
    ck_assert_int_ge(json_array_size(lens), 1);
    for (size_t i = 0; i < json_array_size(lens); i++)
        *fwd = fmax(*fwd, json_number_value(json_object_get(json_array_get(lens, i), "forward_max_abs")));
    json_decref(j);
}

/* A spec that must fail: the run's exit code and one stderr line holding msg. */
typedef struct {
    const char *opt, *msg;
    int code;
} bad_spec;

/* each of bad[0..n) appended to the common options (no output file) */
static void check_bad_specs(const bad_spec *bad, size_t n)
{
    char args[2048];
    for (size_t i = 0; i < n; i++) {
        snprintf(args, sizeof args, "%s --out none %s", g_common, bad[i].opt);
        ck_assert_msg(run(args) == bad[i].code, "%s: exit %d", bad[i].opt, run(args));
        ck_assert_msg(strstr(g_err, bad[i].msg) != NULL, "%s: '%s'", bad[i].opt, g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
    }
}

/* --by (README "Strata") and the growth block: the tables, report's byte-for-byte
 * copy, the JSON keys, bad values; a replay recomputes the same entropy */
START_TEST(test_strata_growth)
{
    char args[2048], common[1024], h5[256];
    static char first[1 << 16];
    /* the bundled model in bf16: the fixture's ratios are all 1, and var(S) 0 */
    snprintf(common, sizeof common,
             "--model data/models/pythia-rc-tiny --backend cpu --prompts %s/p.ids --len 4,8 --samples 2 -q", g_dir);
    snprintf(args, sizeof args, "%s --out %s/st.h5 --by prob,entropy", common, g_dir);
    snprintf(h5, sizeof h5, "%s/st.h5", g_dir);
    const char *const needles[] = {"growth of S with L", "strata at L=8: log r by decile of the sampler's probability",
                                   "strata at L=8: log r by decile of the entropy"};
    check_table_reported(args, h5, " --by prob,entropy", needles, sizeof needles / sizeof needles[0]);
    memcpy(first, g_out, sizeof first);
    /* one kind, and none without --by (the growth block always) */
    snprintf(args, sizeof args, "report %s/st.h5 --by entropy", g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_null(strstr(g_out, "decile of the sampler's probability"));
    ck_assert_ptr_nonnull(strstr(g_out, "decile of the entropy"));
    snprintf(args, sizeof args, "report %s/st.h5", g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_null(strstr(g_out, "strata at"));
    ck_assert_ptr_nonnull(strstr(g_out, "growth of S with L"));
    /* JSON: strata per length (10 deciles each), growth at the top */
    snprintf(args, sizeof args, "report %s/st.h5 --json", g_dir);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    json_t *lens = json_object_get(j, "lens");
    ck_assert_int_eq(json_array_size(lens), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *st = json_object_get(json_array_get(lens, i), "strata");
        for (int k = 0; k < 2; k++) {
            json_t *kind = json_object_get(st, k ? "entropy" : "prob");
            ck_assert_msg(json_is_object(kind), "lens[%zu].strata.%s", i, k ? "entropy" : "prob");
            ck_assert_int_eq(json_integer_value(json_object_get(kind, "count")), i ? 48 : 24); /* 6 x L */
            ck_assert_int_eq(json_array_size(json_object_get(kind, "edges")), 9);
            json_t *d = json_object_get(kind, "deciles");
            ck_assert_int_eq(json_array_size(d), 10);
            json_int_t n = 0;
            for (size_t b = 0; b < 10; b++)
                n += json_integer_value(json_object_get(json_array_get(d, b), "count"));
            ck_assert_int_eq(n, i ? 48 : 24);
            ck_assert_ptr_nonnull(json_object_get(json_array_get(d, 0), "mean_abs_log_ratio"));
        }
    }
    json_t *g = json_object_get(j, "growth");
    ck_assert_msg(json_is_object(g), "no growth");
    ck_assert_int_eq(json_integer_value(json_object_get(g, "points")), 2);
    ck_assert_ptr_nonnull(json_object_get(g, "exponent"));
    ck_assert_ptr_nonnull(json_object_get(g, "cap_length"));
    json_decref(j);
    /* one length, or every S equal: growth n/a with its reason */
    snprintf(args, sizeof args, "%s --out none --len 8", common);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "growth of S with L (README \"Growth\"): n/a: needs 2 or more lengths"));
    snprintf(args, sizeof args, "%s --out none", g_common); /* the fixture: every ratio 1 */
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "n/a: var(S) > 0 at 0 of the 2 lengths, needs 2"));
    /* a replay of the same rollouts recomputes the same entropy, bit for bit */
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --backend cpu --rollouts-from %s/st.h5 -q --out %s/st2.h5",
             g_dir, g_dir);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "report %s/st2.h5 --by prob,entropy", g_dir);
    ck_assert_int_eq(run(args), 0);
    const char *a = strstr(first, "strata at"), *b = strstr(g_out, "strata at");
    ck_assert(a && b);
    ck_assert_int_eq(strncmp(a, b, (size_t)(strstr(a, "\nforward log-prob") - a)), 0);
    /* bad values: usage errors naming the option */
    const bad_spec bad[] = {{"--by p", "--by", 2}, {"--by prob,", "--by", 2}, {"--by ''", "--by", 2},
                            {"--by prob,entropy,x", "--by", 2}};
    check_bad_specs(bad, sizeof bad / sizeof bad[0]);
    snprintf(args, sizeof args, "report %s/st.h5 --by x", g_dir);
    ck_assert_int_eq(run(args), 2);
}
END_TEST

/* --sampler / --trainer: each side computes with its own settings. Equal
 * sides are today's run bit for bit; the trainer's forward equals a replay of
 * the same tokens with the trainer's settings, and the sampler's generation
 * equals a plain run with the sampler's. */
START_TEST(test_two_sides)
{
    char args[2048];
    double gen, fwd;
    snprintf(args, sizeof args, "%s --dtype bf16 --out %s/plain.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "%s --sampler dtype=bf16 --trainer dtype=bf16 --out %s/same.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "  trainer dtype=bf16,kernels=engine,upcast=none,logprob-dtype=fp32\n"));
    diff_max("plain.h5", "same.h5", &gen, &fwd);
    ck_assert(gen == 0.0 && fwd == 0.0);
    /* prefill in chunks: with invariant kernels the cache is the same bit for bit (the batch
     * invariance of every reduction); with engine kernels the generation moves */
    snprintf(args, sizeof args, "%s --kernels invariant --out %s/inv.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "%s --kernels invariant --sampler prefill-chunk=2 --out %s/inv2.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    diff_max("inv.h5", "inv2.h5", &gen, &fwd);
    ck_assert_msg(gen == 0.0 && fwd == 0.0, "chunked prefill, invariant: %g %g", gen, fwd);
    snprintf(args, sizeof args, "%s --dtype fp32 --out %s/plain32.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "%s --dtype fp32 --sampler prefill-chunk=2 --out %s/chunk.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, ",batch=32,prefill-chunk=2"));
    diff_max("plain32.h5", "chunk.h5", &gen, &fwd);
    ck_assert_msg(gen > 0.0, "chunked prefill with engine kernels changes the cached log-probs");
    /* the trainer's forward in chunks through the cache: bitwise the one-call forward with invariant
     * kernels, moved with engine kernels, one call when the chunk holds every sequence */
    snprintf(args, sizeof args, "%s --kernels invariant --trainer prefill-chunk=3 --out %s/invt.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    diff_max("inv.h5", "invt.h5", &gen, &fwd);
    ck_assert_msg(gen == 0.0 && fwd == 0.0, "chunked forward, invariant: %g %g", gen, fwd);
    snprintf(args, sizeof args, "%s --dtype fp32 --trainer prefill-chunk=3 --out %s/chunkt.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "trainer dtype=fp32,kernels=engine,upcast=none,logprob-dtype=fp32,prefill-chunk=3"));
    diff_max("plain32.h5", "chunkt.h5", &gen, &fwd);
    ck_assert_msg(gen == 0.0 && fwd > 0.0, "chunked forward, engine: generation %g, forward %g", gen, fwd);
    snprintf(args, sizeof args, "%s --dtype fp32 --trainer prefill-chunk=1000 --out %s/chunkt2.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    diff_max("plain32.h5", "chunkt2.h5", &gen, &fwd);
    ck_assert(gen == 0.0 && fwd == 0.0);
    snprintf(args, sizeof args, "%s --dtype bf16 --sampler prefill-chunk=100 --out %s/whole.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    diff_max("plain.h5", "whole.h5", &gen, &fwd); /* a chunk longer than every prompt: one call, as before */
    ck_assert(gen == 0.0 && fwd == 0.0);
    /* sampler bf16, trainer bf16 with an fp32 LM head (MiniMax-M1's fix) */
    snprintf(args, sizeof args, "%s --sampler dtype=bf16 --trainer dtype=bf16,lm-head=fp32 --out %s/x.h5 --json",
             g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "sampler")),
                     "dtype=bf16,kernels=engine,upcast=none,logprob-dtype=fp32,batch=32");
    ck_assert_str_eq(json_string_value(json_object_get(j, "trainer")),
                     "dtype=bf16,kernels=engine,upcast=lm_head,logprob-dtype=fp32");
    json_decref(j);
    diff_max("plain.h5", "x.h5", &gen, &fwd);
    ck_assert_msg(gen == 0.0, "the sampler's generation is a plain bf16 run's: %g", gen);
    ck_assert_msg(fwd > 0.0, "the trainer's fp32 head changes the forward");
    snprintf(args, sizeof args, "%s --rollouts-from %s/x.h5 --dtype bf16 --upcast lm_head --out %s/y.h5", g_common,
             g_dir, g_dir);
    ck_assert_int_eq(run(args), 0);
    diff_max("x.h5", "y.h5", &gen, &fwd);
    ck_assert_msg(fwd == 0.0, "the trainer's forward is a bf16 --upcast lm_head forward: %g", fwd);
    /* kernels per side (a second backend), dtype per side, micro-batch */
    snprintf(args, sizeof args,
             "%s --sampler kernels=invariant,dtype=fp32 --trainer kernels=invariant,dtype=fp32,micro-batch=3 --out none "
             "--json", g_common);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "forward_batch")), 3);
    ck_assert(json_number_value(json_object_get(json_array_get(json_object_get(j, "lens"), 1), "std")) == 0.0);
    json_decref(j);
    snprintf(args, sizeof args, "%s --sampler dtype=fp16 --trainer kernels=invariant,dtype=fp32 --out none", g_common);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "trainer dtype=fp32,kernels=invariant,upcast=none"));
    /* autocast over fp32 masters: with invariant kernels on both sides cached == full bit for bit
     * (the mode keeps the batch invariance); as the trainer against a pure bf16 sampler it moves the
     * forward alone */
    snprintf(args, sizeof args, "%s --kernels invariant --sampler mode=autocast --trainer mode=autocast --out none --json",
             g_common);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "trainer")),
                     "dtype=bf16,kernels=invariant,upcast=none,logprob-dtype=fp32,mode=autocast");
    ck_assert(json_number_value(json_object_get(json_array_get(json_object_get(j, "lens"), 1), "std")) == 0.0);
    json_decref(j);
    snprintf(args, sizeof args, "%s --trainer mode=autocast --out %s/ac.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    diff_max("plain.h5", "ac.h5", &gen, &fwd);
    ck_assert_msg(gen == 0.0 && fwd > 0.0, "autocast trainer: generation %g, forward %g", gen, fwd);
    /* Megatron's fp32 residual stream: the trainer's forward alone moves; recorded in its spec; on
     * both sides with invariant kernels cached == full bit for bit */
    snprintf(args, sizeof args, "%s --trainer residual=fp32 --out %s/res.h5 --json", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "trainer")),
                     "dtype=bf16,kernels=engine,upcast=none,logprob-dtype=fp32,residual=fp32");
    json_decref(j);
    diff_max("plain.h5", "res.h5", &gen, &fwd);
    ck_assert_msg(gen == 0.0 && fwd > 0.0, "fp32-residual trainer: generation %g, forward %g", gen, fwd);
    snprintf(args, sizeof args, "%s --kernels invariant --sampler residual=fp32 --trainer residual=fp32 --out none "
             "--json", g_common);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert(json_number_value(json_object_get(json_array_get(json_object_get(j, "lens"), 1), "std")) == 0.0);
    json_decref(j);
    /* fp8 weights on the sampler: weights=bf16 (the default) is the plain run bit for bit; fp8
     * moves the cached generation's log-probs only (the trainer keeps bf16); the modes are recorded */
    snprintf(args, sizeof args, "%s --sampler dtype=bf16,weights=bf16 --trainer weights=dtype --out %s/w16.h5",
             g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    diff_max("plain.h5", "w16.h5", &gen, &fwd);
    ck_assert(gen == 0.0 && fwd == 0.0);
    static const char *const fp8s[] = {"weights=fp8", "weights=fp8,weight-scale=channel,act=dynamic-tensor",
                                       "weights=fp8_e4m3,act=none"};
    static const char *const fp8_str[] = {"weight-scale=tensor,act=dynamic-token",
                                          "weight-scale=channel,act=dynamic-tensor", "weight-scale=tensor,act=none"};
    for (size_t i = 0; i < sizeof fp8s / sizeof fp8s[0]; i++) {
        snprintf(args, sizeof args, "%s --rollouts-from %s/plain.h5 --sampler dtype=bf16,%s --out %s/f8.h5 --force",
                 g_common, g_dir, fp8s[i], g_dir); /* the same tokens, replayed through the fp8 sampler */
        ck_assert_int_eq(run(args), 0);
        char want[160];
        snprintf(want, sizeof want, "logprob-dtype=fp32,batch=32,weights=fp8,%s", fp8_str[i]);
        ck_assert_msg(strstr(g_out, want) != NULL, "%s: %s", fp8s[i], g_out);
        diff_max("plain.h5", "f8.h5", &gen, &fwd);
        ck_assert_msg(gen > 0.0 && fwd == 0.0, "%s: generation %g, forward %g", fp8s[i], gen, fwd);
    }
    /* bad specs */
    const bad_spec bad[] = {{"--trainer tp=3", "trainer tp=3: the model's 4 attention heads are not divisible by 3", 5},
               {"--trainer prefill-chunk=0", "--trainer prefill-chunk", 2},
               {"--trainer weights=fp8", "weights=fp8 is the sampler's", 5},
               {"--trainer weight-scale=block", "belongs to weights=fp8", 5},
               {"--sampler weights=int4", "--sampler weights: 'int4' is not dtype", 2},
               {"--sampler weights=fp8,weight-scale=row", "--sampler weight-scale: 'row' is not one of", 2},
               {"--sampler weights=fp8,act=static", "--sampler act: 'static' is not one of", 2},
               {"--sampler act=none", "weight-scale= and act= need weights=fp8", 2},
               {"--sampler dtype=bf16,weights=fp16", "weights=fp16 but dtype=bf16", 2},
               {"--sampler dtype=fp32,weights=fp8", "weights=fp8 needs dtype=bf16 or fp16", 2},
               {"--sampler weights=fp8,weight-scale=block,act=dynamic-tensor", "in groups of 128", 2},
               {"--sampler weights=fp8,mode=autocast", "weights=fp8 and mode=autocast", 2},
               /* this model's hidden size is 64: no 128 x 128 blocks (the bundled model's are, test_fp8w
                * checks the block GEMM) */
               {"--sampler weights=fp8,weight-scale=block", "multiples of 128 (this model: 64", 5},
               {"--sampler prefill-chunk=0", "--sampler prefill-chunk", 2},
               {"--trainer batch=4", "batch belongs to the sampler", 2},
               {"--sampler micro-batch=4", "micro-batch belongs to the trainer", 2},
               {"--sampler dtype=fp8", "--sampler dtype: 'fp8'", 2},
               {"--sampler dtype=bf16,dtype=fp16", "dtype is given twice", 2},
               {"--trainer upcast=softmax+bogus", "--trainer upcast", 2},
               {"--trainer lm-head=fp64", "is not fp32 or dtype", 2},
               {"--trainer dtype", "'dtype' is not KEY=VALUE", 2},
               {"--trainer foo=1", "unknown key 'foo'", 2},
               {"--trainer micro-batch=0", "--trainer micro-batch", 2},
               {"--trainer mode=autocast,dtype=fp32", "--trainer: mode=autocast needs dtype=bf16 or fp16", 2},
               {"--sampler mode=autocast,upcast=softmax", "of the upcasts only lm-head=fp32 applies", 2},
               {"--sampler mode=amp", "--sampler mode: 'amp' is not pure or autocast", 2},
               {"--trainer residual=bf16", "--trainer residual: 'bf16' is not fp32 or dtype", 2},
               {"--trainer residual=fp32,mode=autocast", "mode=autocast keeps the residual stream in fp32", 2},
               {"--trainer residual=fp32,dtype=fp32", "residual=fp32 needs dtype=bf16 or fp16", 2}};
    check_bad_specs(bad, sizeof bad / sizeof bad[0]);
}
END_TEST

/* a sweep row's statistic by setting name, NAN when absent */
static double sweep_row_num(json_t *j, const char *setting, const char *key)
{
    json_t *rows = json_object_get(json_object_get(j, "sweep"), "rows");
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *r = json_array_get(rows, i);
        if (!strcmp(json_string_value(json_object_get(r, "setting")), setting))
            return json_is_number(json_object_get(r, key)) ? json_number_value(json_object_get(r, key)) : NAN;
    }
    return NAN;
}

START_TEST(test_sweep)
{
    char args[2048];
    /* fp16: the tiny model's bf16 rollouts here happen to agree bitwise (std 0) */
    snprintf(args, sizeof args, "sweep %s --dtype fp16 --out %s/sw.h5 --json", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    json_t *sw = json_object_get(j, "sweep"), *rows = json_object_get(sw, "rows");
    ck_assert_int_eq(json_integer_value(json_object_get(sw, "len")), 8);
    ck_assert_int_ge((int)json_array_size(rows), 10);
    /* the noise floor first: the base replayed, bitwise */
    json_t *r0 = json_array_get(rows, 0);
    ck_assert(json_is_true(json_object_get(r0, "noise_floor")));
    ck_assert(json_is_true(json_object_get(r0, "identical_to_base")));
    const double base_std = json_number_value(json_object_get(json_array_get(json_object_get(j, "lens"), 1), "std"));
    ck_assert(json_number_value(json_object_get(r0, "std")) == base_std);
    ck_assert(base_std > 0);
    /* batch-invariant kernels on both sides: every ratio 1; the setting named as helping most
     * has the lowest k3 of all rows */
    ck_assert(sweep_row_num(j, "both: kernels=invariant", "std") == 0.0);
    /* the corrections are in every row; every ratio 1 masks nothing, not even geometric RS */
    ck_assert(sweep_row_num(j, "both: kernels=invariant", "seq_geo_rs_maskfrac") == 0.0);
    ck_assert(sweep_row_num(j, "both: kernels=invariant", "chi2_token") == 0.0);
    ck_assert(isfinite(sweep_row_num(j, "trainer: lm-head=fp32", "icepop_maskfrac")));
    const char *best = json_string_value(json_object_get(sw, "helps_most"));
    ck_assert_ptr_nonnull(best);
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const double k3 = json_number_value(json_object_get(json_array_get(rows, i), "k3"));
        ck_assert(!(k3 < sweep_row_num(j, best, "k3")));
    }
    ck_assert(sweep_row_num(j, best, "k3") < json_number_value(
                                                json_object_get(json_array_get(json_object_get(j, "lens"), 1), "k3")));
    /* the best of the rows that keep the base's (engine) kernels: the cheaper lever */
    const char *other = json_string_value(json_object_get(sw, "helps_most_without_invariant_kernels"));
    ck_assert_ptr_nonnull(other);
    ck_assert_str_ne(other, "both: kernels=invariant");
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *row = json_array_get(rows, i);
        const bool inv = json_is_true(json_object_get(row, "batch_invariant"));
        ck_assert(inv == !strcmp(json_string_value(json_object_get(row, "setting")), "both: kernels=invariant"));
        if (!inv)
            ck_assert(!(json_number_value(json_object_get(row, "k3")) < sweep_row_num(j, other, "k3")));
    }
    ck_assert(isfinite(sweep_row_num(j, "trainer: mode=autocast", "k3"))); /* gpt_neox: covered */
    ck_assert(isfinite(sweep_row_num(j, "sampler: prefill-chunk=4", "std"))); /* the longest prompt: 7 tokens */
    const double head_std = sweep_row_num(j, "trainer: lm-head=fp32", "std");
    json_decref(j);
    /* a row is a replay of the same tokens with that setting: --rollouts-from gives the same numbers */
    snprintf(args, sizeof args, "%s --dtype fp16 --rollouts-from %s/sw.h5 --trainer lm-head=fp32 --out none --json",
             g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert(json_number_value(json_object_get(json_array_get(json_object_get(j, "lens"), 1), "std")) == head_std);
    json_decref(j);
    /* --rollouts-from without --len: the file's lengths */
    snprintf(args, sizeof args, "--model data/fixtures/neox_parallel --backend cpu -q --rollouts-from %s/sw.h5 --out none --json",
             g_dir);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert_int_eq((int)json_array_size(json_object_get(j, "lens")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(json_object_get(j, "lens"), 0), "len")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(json_object_get(j, "lens"), 1), "len")), 8);
    json_decref(j);
    /* --vary: its own rows; one the model cannot run is skipped with the reason; the table */
    snprintf(args, sizeof args,
             "sweep --model data/fixtures/bloom_alibi --backend cpu --prompts %s/p.ids --len 4 --samples 1 -q --out none "
             "--vary trainer:mode=autocast --vary both:lm-head=fp32,upcast=softmax",
             g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "\nbase again (noise floor)  "));
    ck_assert_ptr_nonnull(strstr(g_out, "\ntrainer: mode=autocast             skipped: mode=autocast is emulated "
                                        "for the rotary families"));
    ck_assert_ptr_nonnull(strstr(g_out, "\nboth: lm-head=fp32,upcast=softmax  "));
    ck_assert_ptr_nonnull(strstr(g_out, "\nnoise floor: the base replayed is bitwise identical"));
    ck_assert_ptr_nonnull(strstr(g_out, "\nhelps most: "));
    /* bad settings: usage errors before any work */
    const char *bad[][2] = {{"--vary foo:dtype=bf16", "the side must be sampler, trainer or both"},
                            {"--vary trainer:batch=2", "batch belongs to the sampler"},
                            {"--vary both", "expected SIDE:KEY=VALUE"},
                            {"--vary", "--vary needs SIDE:SPEC"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "sweep %s --out none %s", g_common, bad[i][0]);
        ck_assert_int_eq(run(args), 2);
        ck_assert_msg(strstr(g_err, bad[i][1]) != NULL, "%s: '%s'", bad[i][0], g_err);
    }
}
END_TEST

/* --sampler kv-cache=: auto is the run without it bit for bit; fp8 moves
 * the sampler's cached log-probs and nothing of the trainer's forward (a
 * replay of the same tokens with the trainer's settings); the scale is the
 * sampler's too; the trainer's key is refused by name. */
START_TEST(test_kv_cache)
{
    char args[2048];
    double gen, fwd;
    snprintf(args, sizeof args, "%s --dtype bf16 --out %s/kv_plain.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "%s --dtype bf16 --sampler kv-cache=auto --out %s/kv_auto.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_null(strstr(g_out, "kv-cache"));
    diff_max("kv_plain.h5", "kv_auto.h5", &gen, &fwd);
    ck_assert_msg(gen == 0.0 && fwd == 0.0, "kv-cache=auto: %g %g", gen, fwd);
    snprintf(args, sizeof args, "%s --dtype bf16 --sampler kv-cache=fp8_e4m3 --out %s/kv_fp8.h5 --json", g_common,
             g_dir);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "sampler")),
                     "dtype=bf16,kernels=engine,upcast=none,logprob-dtype=fp32,batch=32,kv-cache=fp8_e4m3,kv-scale=1");
    ck_assert_str_eq(json_string_value(json_object_get(j, "trainer")),
                     "dtype=bf16,kernels=engine,upcast=none,logprob-dtype=fp32");
    json_decref(j);
    /* the same tokens replayed without the fp8 cache: the forward is the same
     * (the trainer's plain bf16), the cached log-probs move */
    snprintf(args, sizeof args, "%s --rollouts-from %s/kv_fp8.h5 --dtype bf16 --out %s/kv_replay.h5", g_common,
             g_dir, g_dir);
    ck_assert_int_eq(run(args), 0);
    diff_max("kv_fp8.h5", "kv_replay.h5", &gen, &fwd);
    ck_assert_msg(fwd == 0.0, "the trainer's forward is a plain bf16 forward: %g", fwd);
    ck_assert_msg(gen > 0.0, "the fp8 cache moves the sampler's log-probs");
    /* the replay with the fp8 cache is the run again; another scale or e5m2 moves it */
    snprintf(args, sizeof args, "%s --rollouts-from %s/kv_fp8.h5 --dtype bf16 --sampler kv-cache=fp8 --out "
             "%s/kv_fp8b.h5", g_common, g_dir, g_dir);
    ck_assert_int_eq(run(args), 0);
    diff_max("kv_fp8.h5", "kv_fp8b.h5", &gen, &fwd);
    ck_assert_msg(gen == 0.0 && fwd == 0.0, "fp8 is fp8_e4m3: %g %g", gen, fwd);
    const char *other[2] = {"kv-cache=fp8_e4m3,kv-scale=0.01", "kv-cache=fp8_e5m2"};
    for (int i = 0; i < 2; i++) {
        char o[32];
        snprintf(o, sizeof o, "kv_o%d.h5", i);
        snprintf(args, sizeof args, "%s --rollouts-from %s/kv_fp8.h5 --dtype bf16 --sampler %s --out %s/%s",
                 g_common, g_dir, other[i], g_dir, o);
        ck_assert_int_eq(run(args), 0);
        diff_max("kv_fp8.h5", o, &gen, &fwd);
        ck_assert_msg(gen > 0.0 && fwd == 0.0, "%s: %g %g", other[i], gen, fwd);
    }
    const bad_spec bad[] = {{"--trainer kv-cache=fp8_e4m3", "--trainer: kv-cache= is the sampler's", 5},
               {"--trainer kv-scale=2", "--trainer: kv-scale= is the sampler's", 5},
               {"--sampler kv-cache=fp4", "--sampler kv-cache: 'fp4'", 2},
               {"--sampler kv-cache=fp8_e4m3,kv-scale=0", "--sampler kv-scale: '0'", 2},
               {"--sampler kv-cache=fp8_e4m3,kv-scale=1e-50", "--sampler kv-scale: '1e-50'", 2},
               {"--sampler kv-cache=fp8_e4m3,kv-scale=inf", "--sampler kv-scale: 'inf'", 2},
               {"--sampler kv-scale=2", "kv-scale= scales an fp8 KV cache", 2},
               {"--sampler kv-cache=auto,kv-cache=fp8", "kv-cache is given twice", 2}};
    check_bad_specs(bad, sizeof bad / sizeof bad[0]);
}
END_TEST

/* --sampler / --trainer tp=N (README "Numerics", tensor parallelism): tp=1
 * is the run without it bit for bit; at tp 2 every reduce mode is RN(P0 +
 * P1), so the runs are identical; at tp 4 the fp32 and ring reduces part
 * (measured: generation log-probs up to 1.5e-2 apart on neox_parallel bf16);
 * the trainer's TP changes its forward only; impossible degrees exit 5. */
START_TEST(test_tensor_parallel)
{
    char args[2048];
    double gen, fwd;
    snprintf(args, sizeof args, "%s --dtype bf16 --out %s/plain.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "%s --sampler dtype=bf16,tp=1,tp-reduce=ring --trainer dtype=bf16,tp=1 --out %s/t1.h5",
             g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_null(strstr(g_out, "tp="));
    diff_max("plain.h5", "t1.h5", &gen, &fwd);
    ck_assert_msg(gen == 0.0 && fwd == 0.0, "tp=1 is not the plain run: %g %g", gen, fwd);
    /* tp 2: every mode, on both sides, the same bits */
    const char *modes[] = {"fp32", "ring", "chain", "seq"};
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "%s --sampler dtype=bf16,tp=2,tp-reduce=%s --trainer dtype=bf16,tp=2,tp-reduce=%s "
                 "--out %s/tp2_%s.h5", g_common, modes[i], modes[i], g_dir, modes[i]);
        ck_assert_int_eq(run(args), 0);
        if (i > 0) {
            char other[64];
            snprintf(other, sizeof other, "tp2_%s.h5", modes[i]);
            diff_max("tp2_fp32.h5", other, &gen, &fwd);
            ck_assert_msg(gen == 0.0 && fwd == 0.0, "tp 2, %s differs from fp32: %g %g", modes[i], gen, fwd);
        }
    }
    /* the same tokens replayed: the sampler's TP moves the generation only, the trainer's the forward only */
    snprintf(args, sizeof args, "%s --rollouts-from %s/plain.h5 --sampler dtype=bf16,tp=2 --out %s/s2.h5 --json",
             g_common, g_dir, g_dir);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "sampler")),
                     "dtype=bf16,kernels=engine,upcast=none,logprob-dtype=fp32,batch=32,tp=2,tp-reduce=fp32");
    ck_assert_str_eq(json_string_value(json_object_get(j, "trainer")),
                     "dtype=bf16,kernels=engine,upcast=none,logprob-dtype=fp32");
    json_decref(j);
    diff_max("plain.h5", "s2.h5", &gen, &fwd);
    ck_assert_msg(gen > 0.0 && fwd == 0.0, "sampler tp=2: generation %g, forward %g", gen, fwd);
    snprintf(args, sizeof args, "%s --rollouts-from %s/plain.h5 --trainer dtype=bf16,tp=2 --out %s/t2.h5 --json",
             g_common, g_dir, g_dir);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "trainer")),
                     "dtype=bf16,kernels=engine,upcast=none,logprob-dtype=fp32,tp=2,tp-reduce=ring");
    json_decref(j);
    diff_max("plain.h5", "t2.h5", &gen, &fwd);
    ck_assert_msg(gen == 0.0 && fwd > 0.0, "trainer tp=2: generation %g, forward %g", gen, fwd);
    /* tp 4: the fp32 and ring reduces part (per-add rounding in another order) */
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "%s --rollouts-from %s/plain.h5 --sampler dtype=bf16,tp=4,tp-reduce=%s "
                 "--out %s/tp4_%s.h5", g_common, g_dir, modes[i], g_dir, modes[i]);
        ck_assert_int_eq(run(args), 0);
    }
    diff_max("tp4_fp32.h5", "tp4_ring.h5", &gen, &fwd);
    ck_assert_msg(gen > 0.0 && fwd == 0.0, "tp 4, ring vs fp32: generation %g, forward %g", gen, fwd);
    /* degrees the model does not allow (neox_parallel: 4 heads, intermediate 128), bad values */
    const bad_spec bad[] = {{"--sampler tp=3", "sampler tp=3: the model's 4 attention heads are not divisible by 3", 5},
               {"--trainer tp=8", "trainer tp=8: the model's 4 attention heads are not divisible by 8", 5},
               {"--sampler tp=0", "--sampler tp", 2},
               {"--trainer tp=257", "--trainer tp", 2},
               {"--sampler tp=2,tp-reduce=tree", "--sampler tp-reduce: 'tree' is not one of fp32, ring, chain, seq", 2},
               {"--trainer tp=2,tp=4", "tp is given twice", 2},
               {"--sampler weights=fp8,tp=2", "fp8 weights with fp8 activations (W8A8) under tp=2 are not emulated", 5}};
    check_bad_specs(bad, sizeof bad / sizeof bad[0]);
    /* TP keeps batch invariance: invariant kernels and the same TP arithmetic on both sides (llama_gqa has no
     * bias on o_proj / down_proj, so the sides' bias placements agree) give every ratio exactly 1 */
    snprintf(args, sizeof args, "--model data/fixtures/llama_gqa --backend cpu --prompts %s/p.ids --len 4,8 --samples 2 -q "
             "--out none --json --kernels invariant --sampler tp=2 --trainer tp=2", g_dir);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    for (size_t i = 0; i < json_array_size(json_object_get(j, "lens")); i++)
        ck_assert(json_number_value(json_object_get(json_array_get(json_object_get(j, "lens"), i), "std")) == 0.0);
    json_decref(j);
    /* fp8 weight-only (W8A16) under TP: the dequantized weights through the row-parallel layers */
    snprintf(args, sizeof args, "%s --out none --sampler weights=fp8,act=none,tp=2", g_common);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, ",tp=2,tp-reduce=fp32,weights=fp8,weight-scale=tensor,act=none"));
    /* GQA, 4 query / 2 KV heads: vLLM replicates KV heads at tp 4, Megatron cannot */
    snprintf(args, sizeof args, "--model data/fixtures/llama_gqa --backend cpu --prompts %s/p.ids --len 4 -q --out none "
             "--sampler tp=4", g_dir);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "--model data/fixtures/llama_gqa --backend cpu --prompts %s/p.ids --len 4 -q --out none "
             "--trainer tp=4", g_dir);
    ck_assert_int_eq(run(args), 5);
    ck_assert_ptr_nonnull(strstr(g_err, "trainer tp=4: the model's 2 KV heads are not divisible by 4 (Megatron"));
}
END_TEST


/* ratiocheck trace (README "Trace"): a run's worst sequences traced op by op;
 * equal sides part nowhere; hostile input is one line, README's exit codes,
 * and no output file */
START_TEST(test_trace_command)
{
    char args[2048], a[256], t[256];
    snprintf(a, sizeof a, "%s/a.h5", g_dir);
    snprintf(t, sizeof t, "%s/t.h5", g_dir);
    const char *m = "--model data/models/pythia-rc-tiny --backend cpu --num-prompts 3 --samples 2 --len 8 -q";
    snprintf(args, sizeof args, "%s --sampler dtype=bf16 --trainer dtype=bf16,lm-head=fp32 --out %s", m, a);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "trace %s --backend cpu --worst 2 --out %s --json", a, t);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", err.text, g_out);
    ck_assert_int_eq(json_array_size(json_object_get(j, "sequences")), 2);
    ck_assert_int_eq(json_array_size(json_object_get(j, "seq_first")), 2);
    const json_int_t tokens = json_integer_value(json_object_get(j, "replay_tokens"));
    ck_assert_int_eq(tokens, 16);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "replay_equal_gen")), tokens); /* the replay is the run */
    ck_assert_int_eq(json_integer_value(json_object_get(j, "replay_equal_fwd")), tokens);
    ck_assert(json_is_object(json_object_get(j, "first")));
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(j, "trainer")), "upcast=lm_head"));
    json_decref(j);
    ck_assert_int_eq(access(t, F_OK), 0);
    /* the output is a result file: report reads it */
    snprintf(args, sizeof args, "report %s", t);
    ck_assert_int_eq(run(args), 0);
    /* the sides overridden to be equal and invariant: no divergence (table) */
    snprintf(args, sizeof args, "trace %s --backend cpu --seq 0,5 --out none --sampler kernels=invariant,lm-head=fp32 "
             "--trainer kernels=invariant", a);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "first divergence: none"));
    ck_assert_ptr_nonnull(strstr(g_out, "sequences 0, 5"));
    /* hostile input: one line naming the problem, the exit code, no file */
    const int files = count_files(g_dir);
    static const struct {
        const char *args;
        int code;
        const char *msg;
    } bad[] = {
        {"trace @D/p.ids --backend cpu --out @D/x.h5", 4, "not an HDF5 file"},
        {"trace @D/missing.h5 --backend cpu --out @D/x.h5", 6, "missing.h5"},
        {"trace @D/a.h5 --backend cpu --seq 99 --out @D/x.h5", 2, "--seq 99: "},
        {"trace @D/a.h5 --backend cpu --seq 1,1 --out @D/x.h5", 2, "listed twice"},
        {"trace @D/a.h5 --backend cpu --seq 1,x --out @D/x.h5", 2, "--seq"},
        {"trace @D/a.h5 --backend cpu --worst 0 --out @D/x.h5", 2, "--worst"},
        {"trace @D/a.h5 --backend cpu --worst 2 --seq 1 --out @D/x.h5", 2, "cannot be combined"},
        {"trace @D/a.h5 --backend cpu --out @D/t.h5", 2, "t.h5"},
        {"trace @D/a.h5 --backend cpu --trainer kv-cache=fp8 --out @D/x.h5", 5, "kv-cache"},
        {"trace --out @D/x.h5", 2, "give the run's result file"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        subst_dir(args, sizeof args, bad[i].args);
        ck_assert_int_eq(run(args), bad[i].code);
        ck_assert_msg(strstr(g_err, bad[i].msg) != NULL, "%s: %s", args, g_err);
        ck_assert_msg(count_lines(g_err) == 1, "%s: %s", args, g_err);
        ck_assert_int_eq(count_files(g_dir), files);
    }
    snprintf(args, sizeof args, "trace %s/a.h5 --backend cpu --seq 99 --out none", g_dir);
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "has 6 sequences (0 to 5)"));
}
END_TEST

/* trace takes the run's --batch and --forward-batch as its sides' batch and micro-batch, and leaves
 * their prefill chunks alone: a run with --forward-batch 2 replays bit for bit */
START_TEST(test_trace_forward_batch)
{
    char args[2048], a[256];
    snprintf(a, sizeof a, "%s/fb.h5", g_dir);
    snprintf(args, sizeof args, "--model data/models/pythia-rc-tiny --backend cpu --num-prompts 3 --samples 2 --len 8 "
             "-q --forward-batch 2 --out %s", a);
    ck_assert_int_eq(run(args), 0);
    snprintf(args, sizeof args, "trace %s --backend cpu --worst 2 --out none --json", a);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", err.text, g_out);
    const char *sm = json_string_value(json_object_get(j, "sampler"));
    const char *tr = json_string_value(json_object_get(j, "trainer"));
    ck_assert_msg(!strstr(sm, "prefill-chunk") && !strstr(tr, "prefill-chunk"), "%s | %s", sm, tr);
    ck_assert_msg(strstr(sm, "batch=32") && strstr(tr, "micro-batch=2"), "%s | %s", sm, tr);
    const json_int_t tokens = json_integer_value(json_object_get(j, "replay_tokens"));
    ck_assert_int_eq(tokens, 16);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "replay_equal_gen")), tokens);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "replay_equal_fwd")), tokens);
    json_decref(j);
    unlink(a);
}
END_TEST

/* --distribution: JSON keys only with the pass, its gate, the table, report
 * reading it back, a sweep's rows, and the refusals */
START_TEST(test_distribution)
{
    char args[2048];
    snprintf(args, sizeof args, "%s --dtype fp16 --distribution --json --out %s/d.h5", g_common, g_dir);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", err.text, g_out);
    json_t *lens = json_object_get(j, "lens");
    double kl_max = 0.0;
    for (size_t i = 0; i < json_array_size(lens); i++) {
        json_t *e = json_array_get(lens, i);
        ck_assert_int_eq(json_integer_value(json_object_get(e, "dist_count")),
                         json_integer_value(json_object_get(e, "count")));
        const double kl = json_number_value(json_object_get(e, "kl_max")), tv = json_number_value(json_object_get(e, "tv_max"));
        const double top1 = json_number_value(json_object_get(e, "top1_agree"));
        ck_assert(kl >= json_number_value(json_object_get(e, "kl_mean")) && kl >= 0.0);
        ck_assert(tv >= 0.0 && tv <= 1.0 && top1 >= 0.0 && top1 <= 1.0);
        kl_max = kl > kl_max ? kl : kl_max;
    }
    ck_assert(kl_max > 0.0); /* fp16 engine kernels: the two paths' rows differ somewhere */
    json_decref(j);
    /* report recomputes the same numbers from the file's per-token arrays */
    static char first[sizeof g_out];
    memcpy(first, g_out, sizeof first);
    snprintf(args, sizeof args, "report %s/d.h5 --json", g_dir);
    ck_assert_int_eq(run(args), 0);
    const char *a = strstr(first, "\"dist_count\""), *b = strstr(g_out, "\"dist_count\"");
    ck_assert(a && b);
    ck_assert_int_eq(strncmp(a, b, (size_t)(strstr(a, "}") - a)), 0);
    /* the gate: any JSON key of the pass */
    snprintf(args, sizeof args, "%s --dtype fp16 --distribution --out none --fail-above kl_max=0", g_common);
    ck_assert_int_eq(run(args), 3);
    ck_assert_ptr_nonnull(strstr(g_err, "kl_max = "));
    ck_assert_ptr_nonnull(strstr(g_out, "whole distribution per token"));
    snprintf(args, sizeof args, "%s --dtype fp16 --distribution --out none --fail-above kl_max=1,top1_disagree=1",
             g_common);
    ck_assert_int_eq(run(args), 0);
    /* without the pass: no keys, no table, its gates refused */
    snprintf(args, sizeof args, "%s --dtype fp16 --out none --json", g_common);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_null(strstr(g_out, "\"kl_mean\""));
    snprintf(args, sizeof args, "%s --out none --fail-above tv_mean=1", g_common);
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "--fail-above tv_mean needs --distribution"));
    snprintf(args, sizeof args, "%s --out none --distribution --trainer prefill-chunk=2", g_common);
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "prefill-chunk"));
    /* a sweep: every replayed row has its own */
    snprintf(args, sizeof args, "sweep %s --dtype fp16 --distribution --out none --json --vary both:kernels=invariant",
             g_common);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", err.text, g_out);
    ck_assert(sweep_row_num(j, "both: kernels=invariant", "kl_max") == 0.0);
    ck_assert(sweep_row_num(j, "both: kernels=invariant", "top1_agree") == 1.0);
    ck_assert(sweep_row_num(j, "base again (noise floor)", "kl_max") > 0.0);
    json_decref(j);
}
END_TEST

START_TEST(test_run_gates)
{
    char args[2048];
    /* invariant kernels: every log-prob identical, any limit holds */
    snprintf(args, sizeof args, "%s --kernels invariant --out none --fail-above nonidentical_frac=0,std=0,clipfrac=0",
             g_common);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "\ngates (--fail-above): PASS\n"));
    /* the verdict: every objective OK when the two paths agree bitwise */
    ck_assert_ptr_nonnull(strstr(g_out, "  token PPO    OK    no token clipped at step 0"));
    ck_assert_ptr_nonnull(strstr(g_out, "  sequence IS  OK "));
    ck_assert_ptr_nonnull(strstr(g_out, "  GSPO         OK    every sequence has |e^M - 1| <= 0.0003"));
    ck_assert_ptr_nonnull(strstr(g_out, "  every ratio is exactly 1\n"));
    /* JSON: the gates' outcome and the verdict, no text mixed in */
    snprintf(args, sizeof args, "%s --dtype fp16 --out none --json --fail-above std=1 --clip-eps 1e-4", g_common);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", err.text, g_out);
    ck_assert_str_eq(json_string_value(json_object_get(j, "gates")), "PASS");
    const json_t *v = json_object_get(j, "verdict");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(v, "token_ppo"), "level")), "FAIL");
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(json_object_get(v, "token_ppo"), "reason")),
                                 "of tokens clipped at step 0"));
    ck_assert_ptr_nonnull(json_object_get(json_object_get(v, "worst_token"), "ratio"));
    ck_assert_int_ge(json_integer_value(json_object_get(json_object_get(v, "worst_sequence"), "sequence")), 0);
    /* a FAIL line's next step names a sweep command; an OK line has none (docs/verdict.md) */
    const char *next = json_string_value(json_object_get(json_object_get(v, "token_ppo"), "next_step"));
    ck_assert_msg(next && strstr(next, "likely cause: ") && strstr(next, "`ratiocheck sweep --vary "), "%s", next);
    /* the published bands beside the run's worst k3 and mean |log r|, each placed */
    const json_t *bands = json_object_get(v, "reference_bands");
    ck_assert_int_eq((int)json_array_size(bands), (int)rc_n_ref_bands);
    double k3 = 0;
    for (size_t i = 0; i < json_array_size(json_object_get(j, "lens")); i++)
        k3 = fmax(k3, json_number_value(json_object_get(json_array_get(json_object_get(j, "lens"), i), "k3")));
    for (size_t i = 0; i < json_array_size(bands); i++) {
        const json_t *b = json_array_get(bands, i);
        const char *pos = json_string_value(json_object_get(b, "position"));
        const double x = json_number_value(json_object_get(b, "value")), lo = json_number_value(json_object_get(b, "low")),
                     hi = json_number_value(json_object_get(b, "high"));
        ck_assert_ptr_nonnull(pos);
        ck_assert_str_eq(pos, x < lo ? "below" : x > hi ? "above" : "within");
        if (!strcmp(json_string_value(json_object_get(b, "metric")), "k3"))
            ck_assert_double_eq(x, k3);
    }
    json_decref(j);
    snprintf(args, sizeof args, "%s --out none --json", g_common); /* no gates: no "gates" key */
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_null(strstr(g_out, "\"gates\""));
    /* fp16 engine kernels drift: std > 0 fails the gate with exit 3 */
    snprintf(args, sizeof args, "%s --dtype fp16 --out %s/g.h5 --fail-above std=0", g_common, g_dir);
    ck_assert_int_eq(run(args), 3);
    ck_assert_ptr_nonnull(strstr(g_err, "std = "));
    ck_assert_ptr_nonnull(strstr(g_out, "clipfrac")); /* results still printed */
    ck_assert_ptr_nonnull(strstr(g_out, "\ngates (--fail-above): FAIL"));
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

/* --fail-on and --fail-above's verdict and JSON metrics: exit 3 exactly when
 * the run's own JSON (without a gate) says a line reaches the level */
START_TEST(test_run_fail_on)
{
    static const char *const cfgs[] = {"--kernels invariant", "--dtype fp16", "--dtype fp16 --seq-eps 1e-6"};
    int seen[3] = {0, 0, 0};
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        char base[2048];
        snprintf(base, sizeof base, "%s --out none %s", g_common, cfgs[c]);
        rc_gate_check(run, g_out, base, seen, c == 1);
    }
    /* every outcome is tested: a run whose worst line is OK, one WARN, one FAIL */
    ck_assert_int_gt(seen[0], 0);
    ck_assert_int_gt(seen[1], 0);
    ck_assert_int_gt(seen[2], 0);
    /* the table names the gate; stderr says which line failed and why */
    char args[2048];
    snprintf(args, sizeof args, "%s --out none --dtype fp16 --seq-eps 1e-6 --fail-on fail", g_common);
    ck_assert_int_eq(run(args), 3);
    ck_assert_ptr_nonnull(strstr(g_out, "\ngates (--fail-on fail): FAIL"));
    ck_assert_ptr_nonnull(strstr(g_err, "ratiocheck: --fail-on fail: gspo is FAIL: "));
    snprintf(args, sizeof args, "%s --out none --kernels invariant --fail-on warn --fail-above k3=0", g_common);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "\ngates (--fail-above, --fail-on warn): PASS\n"));
    snprintf(args, sizeof args, "%s --out none --fail-on error", g_common);
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "--fail-on: expected warn or fail"));
    snprintf(args, sizeof args, "%s --out none --fail-above verdict.nope=1", g_common);
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
    snprintf(args, sizeof args, "--model data/fixtures/neox_parallel --backend cpu --prompts %s --out %s/never.h5 -q", p, g_dir);
    ck_assert_int_eq(run(args), 4);
    ck_assert_ptr_nonnull(strstr(g_err, "bad.ids: prompt 2: token id 99999"));
    snprintf(p, sizeof p, "%s/never.h5", g_dir);
    ck_assert_int_ne(access(p, F_OK), 0);
}
END_TEST

/* --len ranges: A:B:xK and A:B:+K, mixed with plain lengths, sorted */
START_TEST(test_len_ranges)
{
    char args[2048];
    snprintf(args, sizeof args, "%s --len 2:8:x2,3 --out none --json", g_common);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    json_t *lens = json_object_get(j, "lens");
    const int want[] = {2, 3, 4, 8};
    ck_assert_int_eq((int)json_array_size(lens), 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(lens, (size_t)i), "len")), want[i]);
    json_decref(j);
    snprintf(args, sizeof args, "%s --len 2:7:+2 --out none --json", g_common);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "%s", err.text);
    lens = json_object_get(j, "lens");
    ck_assert_int_eq((int)json_array_size(lens), 3); /* 2, 4, 6 */
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(lens, 2), "len")), 6);
    json_decref(j);
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
        {"--len 4:2:x2", "a range is A:B:xK or A:B:+K with A <= B"},
        {"--len 4:16:x1", "a range's step is xK (K >= 2) or +K (K >= 1)"},
        {"--len 4:16", "a range is A:B:xK"},
        {"--len 1:1000:+1", "at most 32 lengths"},
        {"--len 2:8:x2,4", "listed twice"},
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
    snprintf(args, sizeof args, "--model data/fixtures/neox_parallel --backend cpu --prompts %s --out none", p);
    ck_assert_int_eq(run(args), 4);
    ck_assert_ptr_nonnull(strstr(g_err, "text.ids:2:1: expected a token id"));
    /* --backend cuda never falls back silently: without a usable GPU (no
     * device, no driver, an empty CUDA_VISIBLE_DEVICES) exit 8 with the
     * reason; where one answers, the run is there */
    int nd;
    char dev[256];
    bool have_gpu = rc_cuda_probe(&nd, dev, sizeof dev) == RC_OK;
    if (have_gpu) {
        snprintf(args, sizeof args, "%s --out none --backend cuda --json", g_common);
        ck_assert_int_eq(run(args), 0);
        ck_assert_ptr_nonnull(strstr(g_out, "\"backend\": \"cuda\""));
    } else {
        snprintf(args, sizeof args, "%s --out none --backend cuda", g_common);
        ck_assert_int_eq(run(args), 8);
        ck_assert_ptr_nonnull(strstr(g_err, "CUDA backend: "));
        ck_assert_int_eq(count_lines(g_err), 1);
    }
    snprintf(args, sizeof args, "%s --out none --backend cpu", g_common);
    ck_assert_int_eq(run(args), 0);
    /* auto: cuda only when a device answers; the JSON says which ran */
    snprintf(args, sizeof args, "%s --out none --backend auto --json", g_common);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, have_gpu ? "\"backend\": \"cuda\"" : "\"backend\": \"cpu\", \"device\": \"\""));
#if RC_HAVE_CUDA
    /* the CUDA module opens when a driver library is there: a stand-in
     * (tests/cuda_shim/fake_libcuda.c) makes the module's own probe answer */
    if (!have_gpu) {
        const char *old = getenv("LD_LIBRARY_PATH");
        char *saved = old ? strdup(old) : NULL;
        setenv("LD_LIBRARY_PATH", RC_TEST_BUILD_DIR "/tests", 1);
        snprintf(args, sizeof args, "%s --out none --backend cuda", g_common);
        int code = run(args);
        if (saved) {
            setenv("LD_LIBRARY_PATH", saved, 1);
            free(saved);
        } else {
            unsetenv("LD_LIBRARY_PATH");
        }
        ck_assert_int_eq(code, 8);
        ck_assert_msg(strstr(g_err, "older than the CUDA") != NULL, "the module's probe did not answer: %s", g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
    }
#endif
    /* blas is OpenBLAS: never on the GPU */
    snprintf(args, sizeof args, "%s --out none --backend cuda --kernels blas", g_common);
    ck_assert_int_eq(run(args), have_gpu ? 2 : 8);
    ck_assert_int_eq(count_lines(g_err), 1);
    /* more positions than the model has */
    snprintf(args, sizeof args, "%s --out none --len 100", g_common);
    ck_assert_int_eq(run(args), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "exceeds the model's 64 positions"));
    /* longrope past original_max_position_embeddings (phi3_longrope: 32 of 128): refused before
     * anything runs, naming the prompt's line, exit 5 */
    snprintf(args, sizeof args,
             "--model data/fixtures/phi3_longrope --backend cpu --prompts %s/p.ids --samples 2 -q --out none --len 40",
             g_dir);
    ck_assert_int_eq(run(args), 5);
    ck_assert_ptr_nonnull(strstr(g_err, "p.ids:2: ")); /* the first prompt, after a comment line */
    ck_assert_ptr_nonnull(strstr(g_err, "positions with longrope RoPE: past original_max_position_embeddings 32"));
    ck_assert_int_eq(count_lines(g_err), 1);
}
END_TEST

/* SIGINT: exit 130 and no file at the output path */
START_TEST(test_run_interrupt)
{
    char cmd[4096], p[128];
    snprintf(p, sizeof p, "%s/int.h5", g_dir);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && ('%s/src/ratiocheck' --model data/fixtures/neox_parallel --backend cpu --prompts %s/p.ids --len 50 "
             "--samples 5000 --batch 4 -q --out %s & pid=$!; sleep 1; kill -INT $pid; wait $pid; echo $? > %s/code)",
             getenv("RC_SOURCE_DIR"), RC_TEST_BUILD_DIR, g_dir, p, g_dir);
    ck_assert_int_ne(system(cmd), -1);
    char cp[128];
    snprintf(cp, sizeof cp, "%s/code", g_dir);
    rc_test_slurp(cp, g_out, sizeof g_out);
    ck_assert_int_eq(atoi(g_out), 130);
    ck_assert_int_ne(access(p, F_OK), 0);
    unlink(cp);
    ck_assert_int_eq(count_files(g_dir), 1); /* p.ids only */
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
    tcase_add_test(tc, test_command_help_tables);
    tcase_add_test(tc, test_inspect_errors);
    tcase_add_test(tc, test_inspect_fp8_split);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("run");
    tcase_add_checked_fixture(tr, run_setup, run_teardown);
    tcase_set_timeout(tr, 120);
    tcase_add_test(tr, test_run_json);
    tcase_add_test(tr, test_run_gates);
    tcase_add_test(tr, test_distribution);
    tcase_add_test(tr, test_run_fail_on);
    tcase_add_test(tr, test_stat_options);
    tcase_add_test(tr, test_strata_growth);
    tcase_add_test(tr, test_two_sides);
    tcase_add_test(tr, test_kv_cache);
    tcase_add_test(tr, test_tensor_parallel);
    tcase_add_test(tr, test_sweep);
    tcase_add_test(tr, test_run_output_file);
    tcase_add_test(tr, test_run_bad_options);
    tcase_add_test(tr, test_len_ranges);
    tcase_add_test(tr, test_run_interrupt);
    text_tests_in_run(tr);
    robust_tests_in_run(tr);
    text_tests_in_run_2(tr);
    moe_tests_in_run(tr);
    tcase_add_test(tr, test_trace_command);
    tcase_add_test(tr, test_trace_forward_batch);
    suite_add_tcase(s, tr);
    TCase *tx = tcase_create("robust");
    tcase_add_checked_fixture(tx, run_setup, run_teardown);
    tcase_set_timeout(tx, 120);
    robust_tests_in_robust(tx);
    suite_add_tcase(s, tx);
    TCase *tg = tcase_create("rough");
    tcase_add_checked_fixture(tg, run_setup, run_teardown);
    tcase_set_timeout(tg, 120);
    robust_tests_in_rough(tg);
    suite_add_tcase(s, tg);
    return rc_test_run(s);
}
