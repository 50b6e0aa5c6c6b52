/* ratiocheck command line. The only place that calls exit(). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "forward.h"
#include "fp8w.h"
#include "model.h"
#include "prompts.h"
#include "rc_build_config.h"
#include "rc_cuda.h"
#include "results.h"
#include "rollout.h"
#include "rollouts_in.h"
#include "score.h"
#include "status.h"
#include "tokenizer.h"
#include "trace.h"
#include "util.h"

static const char *k_usage =
    "Usage: ratiocheck [run] [OPTIONS]      the ratio check (see ratiocheck run --help)\n"
    "       ratiocheck inspect --model DIR [--json]\n"
    "\n"
    "Checks whether the log-probs a sampler records during KV-cached generation\n"
    "agree with the log-probs a trainer recomputes in one batched forward pass.\n"
    "\n"
    "Example: ratiocheck --model path/to/hf-model --dtype bf16 --len 20,40,50\n"
    "\n"
    "Commands:\n"
    "  run (default)                  sample, re-score, report the PPO ratio\n"
    "  sweep [RUN OPTIONS] [--vary SIDE:SPEC]...   one setting at a time over the\n"
    "                                 same rollouts, with a noise floor\n"
    "  inspect --model DIR [--json]   describe a Hugging Face model folder\n"
    "  tokenize --model DIR TEXT...   token ids and pieces of TEXT (tokenizer.json)\n"
    "  report FILE.h5 [--json]        the run's summary again, from its result file\n"
    "  diff A.h5 B.h5 [--json]        two runs over the same tokens, side by side\n"
    "  trace RUN.h5 [--worst K | --seq LIST]   where the sampler's and the trainer's\n"
    "                                 forward passes part, op by op and layer by layer\n"
    "  score --rollouts FILE [RUN OPTIONS]   re-score rollouts your own engine\n"
    "                                 logged (vLLM, SGLang, JSONL, HDF5) as the trainer\n"
    "\n"
    "Options:\n"
    "  -h, --help      show this help\n"
    "  -V, --version   show the version\n"
    "\n"
    "Exit codes: 0 ok, 1 internal error, 2 usage error, 3 threshold exceeded,\n"
    "4 malformed input file, 5 unsupported model or feature, 6 I/O error,\n"
    "7 out of memory, 8 device error, 130 interrupted (SIGINT), 143 terminated (SIGTERM).\n";

static volatile sig_atomic_t g_signal; /* the SIGINT / SIGTERM that arrived, or 0 */

/* s with control characters and bytes that are not UTF-8 shown as \xNN, so
 * that a file name or a string read from a file cannot drive the terminal */
static void term_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = rc_utf8_seq_len(p);
        /* C0, DEL, and the C1 controls U+0080..U+009F (C2 80..C2 9F) */
        if (n == 0 || *p < 0x20 || *p == 0x7f || (n == 2 && p[0] == 0xC2 && p[1] < 0xA0)) {
            for (int i = 0; i < (n ? n : 1); i++)
                fprintf(f, "\\x%02x", p[i]);
            p += n ? n : 1;
        } else {
            fwrite(p, 1, (size_t)n, f);
            p += n;
        }
    }
}

/* JSON string literal with escapes; bytes that are not UTF-8 become U+FFFD,
 * so the output is always valid JSON */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned char c = *p;
        int n = rc_utf8_seq_len(p);
        if (n == 0) {
            fputs("\\ufffd", f);
            p++;
            continue;
        }
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fwrite(p, 1, (size_t)n, f);
        p += n;
    }
    fputc('"', f);
}

static int fail(rc_status st)
{
    fputs("ratiocheck: ", stderr);
    if (st == RC_ERR_INTERNAL)
        fputs("internal error (a bug: please report it): ", stderr);
    fprintf(stderr, "%s\n", rc_last_error()); /* one line, terminal-safe (status.c) */
    if (st == RC_ERR_INTERRUPTED && g_signal)
        return 128 + g_signal;
    return rc_exit_code(st);
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ratiocheck: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see ratiocheck --help)\n");
    va_end(ap);
    return rc_exit_code(RC_ERR_USAGE);
}

static const char *act_name(rc_act a)
{
    switch (a) {
    case RC_ACT_GELU_ERF: return "gelu (erf)";
    case RC_ACT_GELU_TANH: return "gelu (tanh)";
    case RC_ACT_GELU_NEW: return "gelu_new";
    case RC_ACT_GELU_BLOOM: return "gelu (BLOOM's tanh)";
    case RC_ACT_SILU: return "silu";
    }
    return "?";
}

static const char *rope_name(rc_rope_type t)
{
    switch (t) {
    case RC_ROPE_DEFAULT: return "default";
    case RC_ROPE_LINEAR: return "linear";
    case RC_ROPE_LLAMA3: return "llama3";
    case RC_ROPE_YARN: return "yarn";
    }
    return "?";
}

/* ---- options: one table per command ---------------------------------------- */

static rc_status parse_i64(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out);
static rc_status parse_f64(const char *opt, const char *v, double lo, double hi, double *out);

typedef struct opt_spec opt_spec;
/* Parse `v` (NULL for a flag) into the option's destination in `dst` (the
 * command's options struct). */
typedef rc_status (*opt_parse_fn)(const opt_spec *o, const char *v, void *dst);

/* One option: its long name (and short letter), the metavar shown in --help
 * (NULL for a flag), the help text ('\n' starts a continuation line), the
 * section it opens in --help (or NULL), the parser and its destination
 * (an offset into the command's options struct; lo/hi bound integers and
 * numbers). getopt's list and --help are both made from a command's table
 * (parse_opts, print_opts_usage): every command has one. */
struct opt_spec {
    const char *name;
    int short_name;
    const char *metavar;
    const char *help;
    const char *section;
    opt_parse_fn parse;
    size_t off;
    double lo, hi;
};

#define OPT_AT(o, dst, T) ((T *)(void *)((char *)(dst) + (o)->off))

static rc_status op_path(const opt_spec *o, const char *v, void *dst)
{
    if (!v[0])
        return rc_errorf(RC_ERR_USAGE, "--%s: the path is empty%s", o->name,
                         strcmp(o->name, "out") ? "" : " (--out none writes no file)");
    *OPT_AT(o, dst, const char *) = v;
    return RC_OK;
}

static rc_status op_flag(const opt_spec *o, const char *v, void *dst)
{
    (void)v;
    *OPT_AT(o, dst, bool) = true;
    return RC_OK;
}

static rc_status op_i64(const opt_spec *o, const char *v, void *dst)
{
    char name[64];
    snprintf(name, sizeof name, "--%s", o->name);
    /* hi = 0x1p63 stands for INT64_MAX, which a double cannot hold */
    return parse_i64(name, v, (int64_t)o->lo, o->hi >= 0x1p63 ? INT64_MAX : (int64_t)o->hi, OPT_AT(o, dst, int64_t));
}

/* --by prob|entropy|prob,entropy: a bit per strata kind (results.h RC_STRATA_*) */
static rc_status op_by(const opt_spec *o, const char *v, void *dst)
{
    unsigned m = 0;
    for (const char *p = v;;) {
        const char *end = strchr(p, ',');
        const size_t n = end ? (size_t)(end - p) : strlen(p);
        int k = 0;
        while (k < RC_N_STRATA && !(strlen(rc_strata_names[k]) == n && !strncmp(p, rc_strata_names[k], n)))
            k++;
        if (k == RC_N_STRATA)
            return rc_errorf(RC_ERR_USAGE, "--%s: '%.*s' is not prob or entropy (e.g. --%s prob,entropy)", o->name,
                             (int)n, p, o->name);
        m |= 1u << k;
        if (!end)
            break;
        p = end + 1;
    }
    *OPT_AT(o, dst, unsigned) = m;
    return RC_OK;
}

static rc_status op_f64(const opt_spec *o, const char *v, void *dst)
{
    char name[64];
    snprintf(name, sizeof name, "--%s", o->name);
    return parse_f64(name, v, o->lo, o->hi, OPT_AT(o, dst, double));
}

/* A command's --help: its usage text, then the table's options (the help
 * text from column 25, on the next line when the name is longer,
 * continuation lines indented to it). */
static void print_opts_usage(FILE *f, const char *usage, const opt_spec *t, size_t n)
{
    fputs(usage, f);
    for (size_t i = 0; i < n; i++) {
        const opt_spec *o = &t[i];
        if (o->section)
            fprintf(f, "%s\n", o->section);
        char head[96];
        int w = o->short_name ? snprintf(head, sizeof head, "  -%c, --%s", o->short_name, o->name)
                              : snprintf(head, sizeof head, "  --%s", o->name);
        if (o->metavar)
            w += snprintf(head + w, sizeof head - (size_t)w, " %s", o->metavar);
        fprintf(f, "%s%*s", head, w < 25 ? 25 - w : 0, "");
        if (w >= 25)
            fprintf(f, "\n%25s", "");
        for (const char *h = o->help;;) {
            const char *nl = strchr(h, '\n');
            fwrite(h, 1, nl ? (size_t)(nl - h) : strlen(h), f);
            fputc('\n', f);
            if (!nl)
                break;
            h = nl + 1;
            fprintf(f, "%25s", "");
        }
    }
}

#define MAX_OPTS 64

/* Parse argv's options with table t into dst (defaults already there).
 * help_off: the offset of the command's `bool help` (its "help" entry sets
 * it): --help prints the usage. Returns an exit code when the command is
 * done (--help, a usage error), else -1; optind is then the first operand. */
static int parse_opts(int argc, char **argv, const opt_spec *t, size_t n, void *dst, size_t help_off,
                      const char *usage)
{
    struct option lopts[MAX_OPTS + 1];
    char shorts[2 * MAX_OPTS + 2] = ":";
    size_t ns = 1;
    if (n > MAX_OPTS)
        return fail(rc_errorf(RC_ERR_INTERNAL, "option table of %zu entries", n));
    for (size_t i = 0; i < n; i++) {
        const opt_spec *o = &t[i];
        lopts[i] = (struct option){o->name, o->metavar ? required_argument : no_argument, NULL, (int)(256 + i)};
        if (o->short_name) {
            shorts[ns++] = (char)o->short_name;
            if (o->metavar)
                shorts[ns++] = ':';
        }
    }
    shorts[ns] = '\0';
    lopts[n] = (struct option){0, 0, 0, 0};
    bool *help = (bool *)(void *)((char *)dst + help_off);
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, shorts, lopts, NULL)) != -1) {
        const opt_spec *o = NULL;
        if (c >= 256 && c < 256 + (int)n)
            o = &t[c - 256];
        for (size_t i = 0; !o && c > 0 && c < 256 && i < n; i++)
            if (t[i].short_name == c)
                o = &t[i];
        if (c == ':')
            return usage_error("option %s needs a value", argv[optind - 1]);
        if (!o)
            return usage_error("unknown option %s", argv[optind - 1]);
        rc_status st = o->parse(o, o->metavar ? optarg : NULL, dst);
        if (st != RC_OK)
            return fail(st);
        if (*help) {
            print_opts_usage(stdout, usage, t, n);
            return 0;
        }
    }
    return -1;
}

#define OPT_HELP(T) {"help", 'h', NULL, "show this help", NULL, op_flag, offsetof(T, help), 0, 0}

/* ---- inspect -------------------------------------------------------------- */

typedef struct {
    const char *model, *dtype;
    int64_t batch, seqs, tokens;
    bool json, help, no_speed;
} inspect_opts;

static const opt_spec k_inspect_opts[] = {
    {"model", 'm', "DIR", "Hugging Face model folder (required)", NULL, op_path, offsetof(inspect_opts, model), 0, 0},
    {"dtype", 0, "fp32|fp16|bf16", "the run's dtype, for the memory estimate (default bf16)", "Memory estimate:",
     op_path, offsetof(inspect_opts, dtype), 0, 0},
    {"batch", 0, "N", "sequences decoded together (default 32, as run)", NULL, op_i64, offsetof(inspect_opts, batch),
     1, 1 << 20},
    {"seqs", 0, "N", "sequences re-scored in one forward (run's --forward-batch,\nby default all of them; default 64)",
     NULL, op_i64, offsetof(inspect_opts, seqs), 1, 1 << 20},
    {"tokens", 0, "N", "prompt + generated tokens per sequence (default 256)", NULL, op_i64,
     offsetof(inspect_opts, tokens), 1, RC_LIM_POS},
    {"no-speed", 0, NULL, "skip the speed estimate (it times GEMMs for about a second)", NULL, op_flag,
     offsetof(inspect_opts, no_speed), 0, 0},
    {"json", 0, NULL, "print one JSON object", "Output:", op_flag, offsetof(inspect_opts, json), 0, 0},
    OPT_HELP(inspect_opts),
};

static double mono_now(void);

/* This machine's GEMM rate (GFLOP/s) at M rows, K = hidden, N = min(inner,
 * 2048): the median of a few calls of the CPU backend's engine kernels after
 * one warm-up; 0 when a call fails. */
static double gemm_rate(rc_backend *be, int64_t M, int64_t K, int64_t N, const float *x, rc_wt W, float *y)
{
    double t[5];
    int n = 0;
    if (be->ops->matmul(be, x, M, K, W, N, NULL, RC_F32, RC_F32, y) != RC_OK)
        return 0.0;
    const double t_end = mono_now() + 0.4;
    for (; n < 5 && (n < 2 || mono_now() < t_end); n++) {
        double t0 = mono_now();
        if (be->ops->matmul(be, x, M, K, W, N, NULL, RC_F32, RC_F32, y) != RC_OK)
            return 0.0;
        t[n] = mono_now() - t0;
    }
    for (int i = 1; i < n; i++) /* sort */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double v = t[j];
            t[j] = t[j - 1];
            t[j - 1] = v;
        }
    return 2.0 * (double)M * (double)K * (double)N / (t[n / 2] > 1e-9 ? t[n / 2] : 1e-9) / 1e9;
}

/* The speed estimate of inspect: GEMM FLOPs per token of the model (every
 * layer's projections and the LM head) over the GEMM rate measured now at
 * the decode batch and at a re-score-sized M. GEMMs only: attention,
 * norms, activations and sampling come on top (measured: about half of the
 * bundled model's check, a third of a SmolLM2-135M-shaped generation). */
typedef struct {
    double gflop_per_token, gflops_decode, gflops_forward, s_per_1k_decode, s_per_1k_forward;
    int64_t m_decode, m_forward;
} speed_estimate;

static rc_status estimate_speed(const rc_config *k, int64_t batch, rc_dtype dt, speed_estimate *se)
{
    const int64_t H = k->hidden, I = k->intermediate;
    double layers = 0.0; /* every layer's GEMM FLOPs per token (MoE: the experts a token runs) */
    for (int64_t l = 0; l < k->n_layers; l++) {
        int64_t we;
        double f;
        rc_layer_cost(k, l, &we, &f);
        layers += f;
    }
    se->gflop_per_token = (layers + 2.0 * (double)k->vocab * (double)H) / 1e9;
    const int64_t N = I < 2048 ? I : 2048, Mf = 288;
    se->m_decode = batch < 256 ? batch : 256;
    se->m_forward = Mf;
    rc_backend *be = NULL;
    float *x = NULL, *y = NULL;
    void *W = NULL, *W16 = NULL;
    rc_status s = rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be);
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&x, Mf * H, sizeof(float), "speed estimate");
    if (s == RC_OK)
        s = rc_alloc_aligned(&W, N * H, sizeof(float), "speed estimate");
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&y, Mf * N, sizeof(float), "speed estimate");
    if (s == RC_OK) {
        for (int64_t i = 0; i < Mf * H; i++)
            x[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
        for (int64_t i = 0; i < N * H; i++)
            ((float *)W)[i] = (float)((i * 104729) % 2001 - 1000) * 1e-5f;
        /* the weights as a run of dtype dt holds them: 2 bytes for bf16 / fp16 */
        rc_wt w = rc_wt_f32(W);
        if (dt != RC_F32 && (s = rc_alloc_aligned(&W16, N * H, 2, "speed estimate")) == RC_OK) {
            rc_wt_convert(w, 0, N * H, dt, dt, W16);
            w = (rc_wt){W16, dt, false};
        }
        se->gflops_decode = s == RC_OK ? gemm_rate(be, se->m_decode, H, N, x, w, y) : 0.0;
        se->gflops_forward = s == RC_OK ? gemm_rate(be, Mf, H, N, x, w, y) : 0.0;
        if (s == RC_OK && !(se->gflops_decode > 0.0 && se->gflops_forward > 0.0))
            s = rc_errorf(RC_ERR_INTERNAL, "inspect: timing the GEMMs failed: %s", rc_last_error());
        se->s_per_1k_decode = 1000.0 * se->gflop_per_token / se->gflops_decode;
        se->s_per_1k_forward = 1000.0 * se->gflop_per_token / se->gflops_forward;
    }
    free(x);
    free(W);
    free(W16);
    free(y);
    if (be)
        rc_backend_destroy(be);
    return s;
}

static rc_status parse_dtype(const char *v, rc_dtype *dt);
static const char *dtype_str(rc_dtype dt);

static int cmd_inspect(int argc, char **argv)
{
    inspect_opts io = {.dtype = "bf16", .batch = 32, .seqs = 64, .tokens = 256};
    int code = parse_opts(argc, argv, k_inspect_opts, sizeof k_inspect_opts / sizeof k_inspect_opts[0], &io,
                          offsetof(inspect_opts, help),
                          "Usage: ratiocheck inspect --model DIR [--json] [--dtype D --batch N --seqs N --tokens N]\n\n"
                          "The model's architecture as ratiocheck reads it, the memory a run\nwith these sizes "
                          "allocates and an estimate of its speed on this machine.\nReads config.json and the "
                          "safetensors headers, never the weights.\n\n");
    if (code >= 0)
        return code;
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!io.model)
        return usage_error("%s: --model DIR is required", "inspect");
    const char *model = io.model;
    const int json = io.json;
    rc_model *m;
    rc_status st = rc_model_load_headers(model, &m);
    if (st != RC_OK)
        return fail(st);
    const rc_config *k = &m->cfg;
    char pc[32];
    rc_numerics num = rc_numerics_fp32();
    rc_engine_mem em;
    st = parse_dtype(io.dtype, &num.dt);
    if (st == RC_OK) /* as a run in this dtype holds the model's load-time copies */
        st = rc_model_narrow(m, num.dt);
    if (st != RC_OK) {
        rc_model_free(m);
        return fail(st);
    }
    speed_estimate se = {0};
    if (!io.no_speed && (st = estimate_speed(k, io.batch, num.dt, &se)) != RC_OK) {
        rc_model_free(m);
        return fail(st);
    }
    /* what a run holds: the model's weights it reads in place from the mapped
     * files and the model's arena (layout fixes), then the engine the run
     * creates (rollout.c: max(batch, seqs) slots, tokens positions, rows for
     * the larger of the decode prefill and the forward batch) */
    const int64_t slots = io.batch > io.seqs ? io.batch : io.seqs;
    int64_t rows;
    if (!rc_mul_i64(slots, io.tokens, &rows))
        rows = INT64_MAX;
    st = rc_engine_mem_estimate(m, &num, true, RC_KERNELS_ENGINE, slots, io.tokens, rows, &em);
    if (st != RC_OK) {
        rc_model_free(m);
        return fail(st);
    }
    const int64_t model_bytes = m->arena_bytes + em.weights_in_place;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (json) {
        printf("{\"model\": ");
        json_str(stdout, model);
        printf(", \"model_type\": ");
        json_str(stdout, k->model_type);
        printf(", \"family\": ");
        json_str(stdout, k->arch->family);
        printf(", \"layers\": %lld, \"hidden\": %lld, \"heads\": %lld, \"kv_heads\": %lld, \"head_dim\": %lld, "
               "\"intermediate\": %lld, \"vocab\": %lld, \"max_positions\": %lld, \"parameters\": %lld, "
               "\"positions\": \"%s\", \"norm_head\": %s, \"stored_dtype\": ",
               (long long)k->n_layers, (long long)k->hidden, (long long)k->n_heads, (long long)k->n_kv_heads,
               (long long)k->head_dim, (long long)k->intermediate, (long long)k->vocab, (long long)k->max_pos,
               (long long)m->n_params,
               k->pos == RC_POS_ROTARY ? "rotary" : k->pos == RC_POS_ALIBI ? "alibi" : "learned",
               k->norm_head ? "true" : "false");
        json_str(stdout, m->stored_dtype);
        printf(", \"memory\": {\"dtype\": \"%s\", \"batch\": %lld, \"seqs\": %lld, \"tokens\": %lld, "
               "\"model_bytes\": %lld, \"weights_copy_bytes\": %lld, \"kv_cache_bytes\": %lld, "
               "\"activation_bytes\": %lld, \"total_bytes\": %lld}",
               dtype_str(num.dt), (long long)io.batch, (long long)io.seqs, (long long)io.tokens,
               (long long)model_bytes, (long long)em.weights_copy, (long long)em.kv_cache, (long long)em.activations,
               (long long)(model_bytes + em.total));
        if (!io.no_speed)
            printf(", \"speed\": {\"gemm_gflop_per_token\": %.6g, \"decode_m\": %lld, \"decode_gflops\": %.4g, "
                   "\"forward_m\": %lld, \"forward_gflops\": %.4g, \"decode_s_per_1k_tokens\": %.4g, "
                   "\"forward_s_per_1k_tokens\": %.4g, \"gemm_only\": true}",
                   se.gflop_per_token, (long long)se.m_decode, se.gflops_decode, (long long)se.m_forward,
                   se.gflops_forward, se.s_per_1k_decode, se.s_per_1k_forward);
        printf(", \"per_layer\": [");
        for (int64_t l = 0; l < k->n_layers; l++) { /* what --layers N keeps: the first N of these */
            int64_t we;
            double f;
            rc_layer_cost(k, l, &we, &f);
            printf("%s{\"layer\": %lld, \"moe\": %s, \"weight_bytes\": %lld, \"gemm_gflop_per_token\": %.6g", l ? ", " : "",
                   (long long)l, rc_layer_is_moe(k, l) ? "true" : "false", (long long)(we * rc_dtype_size(num.dt)),
                   f / 1e9);
            if (!io.no_speed)
                printf(", \"decode_s_per_1k_tokens\": %.4g", 1000.0 * f / 1e9 / se.gflops_decode);
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("model          ");
        term_str(stdout, model);
        printf("\narchitecture   ");
        term_str(stdout, k->model_type);
        printf(" (family %s)\n", k->arch->family);
        printf("layers         %lld\n", (long long)k->n_layers);
        printf("hidden         %lld\n", (long long)k->hidden);
        printf("heads          %lld\n", (long long)k->n_heads);
        printf("kv heads       %lld\n", (long long)k->n_kv_heads);
        printf("head_dim       %lld\n", (long long)k->head_dim);
        printf("intermediate   %lld\n", (long long)k->intermediate);
        printf("vocab          %lld\n", (long long)k->vocab);
        printf("max positions  %lld\n", (long long)k->max_pos);
        printf("norm           %s, eps %g\n", k->norm == RC_NORM_LAYER ? "LayerNorm" : "RMSNorm", k->norm_eps);
        printf("activation     %s%s\n", act_name(k->act), k->gated_mlp ? ", gated (SwiGLU)" : "");
        printf("residual       %s\n", k->parallel_residual ? "parallel" : "sequential");
        if (k->n_experts > 0) { /* mixture of experts */
            int64_t n_moe = 0;
            for (int64_t l = 0; l < k->n_layers; l++)
                n_moe += rc_layer_is_moe(k, l);
            printf("experts        %lld, top %lld%s, expert inner %lld", (long long)k->n_experts, (long long)k->top_k,
                   k->norm_topk_prob ? " renormalised" : "", (long long)k->moe_intermediate);
            if (k->shared_intermediate > 0)
                printf(", shared expert %lld", (long long)k->shared_intermediate);
            printf("; %lld of %lld layers MoE\n", (long long)n_moe, (long long)k->n_layers);
        }
        if (k->pos == RC_POS_ROTARY) {
            printf("rope           %s, theta %g, rotary dims %lld of %lld%s\n", rope_name(k->rope_type),
                   k->rope_theta, (long long)k->rotary_dim, (long long)k->head_dim,
                   k->rope_f32 ? " (fp32 inside)" : "");
        } else if (k->pos == RC_POS_ALIBI) {
            static const char *const slopes[] = {"BLOOM", "Baichuan", "MPT"};
            static const char *const add[] = {"fused into the scaled scores", "added in the model dtype",
                                              "added in fp32"};
            printf("positions      ALiBi, %s slopes, bias from %s, %s\n", slopes[k->alibi_slopes],
                   k->alibi_from_last_key ? "the last key" : "key position 0", add[k->alibi_add]);
        } else {
            printf("positions      learned, %lld\n", (long long)k->max_pos);
        }
        if (k->embed_norm)
            printf("embedding norm yes\n");
        if (k->clip_qkv > 0)
            printf("clip_qkv       %g\n", k->clip_qkv);
        if (k->score_div || k->attn_f32)
            printf("scores         %s%s\n", k->score_div ? "divided by sqrt(head_dim)" : "",
                   k->attn_f32 ? ", fp32 (SDPA)" : "");
        if (k->norm_head)
            printf("lm head        NormHead (rows L2-normalised)\n");
        printf("tied embedding %s\n", k->tie_embeddings ? "yes" : "no");
        printf("parameters     %s (%lld)\n", rc_fmt_count(pc, sizeof pc, m->n_params), (long long)m->n_params);
        printf("stored dtype   ");
        term_str(stdout, m->stored_dtype);
        printf("\n");
        printf("memory         %.2f GiB for a %s run, %lld sequences decoded and %lld re-scored together, "
               "%lld tokens each:\n",
               (double)(model_bytes + em.total) / gib, dtype_str(num.dt), (long long)io.batch, (long long)io.seqs,
               (long long)io.tokens);
        printf("               weights %.2f GiB (the checkpoint's, read in place or copied at load) + %.2f GiB "
               "(rounded to %s), KV cache %.2f GiB, activations %.2f GiB\n",
               (double)model_bytes / gib, (double)em.weights_copy / gib, dtype_str(num.dt), (double)em.kv_cache / gib,
               (double)em.activations / gib);
        if (!io.no_speed)
            printf("speed          about %.3g s per 1k generated tokens (decoding %lld at a time) and %.3g s per 1k "
                   "re-scored tokens on this machine:\n"
                   "               GEMMs only (%.3g GFLOP per token at %.0f / %.0f GFLOP/s measured just now); "
                   "attention, norms and sampling add to it\n",
                   se.s_per_1k_decode, (long long)se.m_decode, se.s_per_1k_forward, se.gflop_per_token,
                   se.gflops_decode, se.gflops_forward);
        /* per decoder layer, once per kind (dense / MoE): what --layers N adds per layer */
        for (int moe = 0; moe < 2; moe++)
            for (int64_t l = 0; l < k->n_layers; l++) {
                if (rc_layer_is_moe(k, l) != (moe == 1))
                    continue;
                int64_t we;
                double f;
                rc_layer_cost(k, l, &we, &f);
                printf("%s %.3g MiB of %s weights, %.3g GEMM GFLOP per token", moe ? "per MoE layer " : "per layer     ",
                       (double)(we * rc_dtype_size(num.dt)) / (1024.0 * 1024.0), dtype_str(num.dt), f / 1e9);
                if (!io.no_speed)
                    printf(", about %.3g s per 1k decoded tokens", 1000.0 * f / 1e9 / se.gflops_decode);
                printf(" (--layers N runs the first N)\n");
                break;
            }
    }
    rc_model_free(m);
    return 0;
}

static double mono_now(void);

/* A file that may be absent: *present says whether it is there; anything
 * there that is not a regular file (a FIFO, a device, a folder) is an error
 * naming it. */
static rc_status optional_file(const char *path, bool *present)
{
    struct stat sb;
    *present = false;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return RC_OK;
        return rc_errorf(RC_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode))
        return rc_errorf(RC_ERR_IO, "%s: not a regular file", path);
    *present = true;
    return RC_OK;
}

/* ---- tokenize ------------------------------------------------------------- */

typedef struct {
    const char *model, *file;
    bool json, special, help;
} tokenize_opts;

static const opt_spec k_tokenize_opts[] = {
    {"model", 'm', "DIR", "model folder (or a folder with only tokenizer.json) (required)", NULL, op_path,
     offsetof(tokenize_opts, model), 0, 0},
    {"add-special", 0, NULL, "add the special tokens the tokenizer's post-processor adds", NULL, op_flag,
     offsetof(tokenize_opts, special), 0, 0},
    {"json", 0, NULL, "print JSON (ids and pieces)", NULL, op_flag, offsetof(tokenize_opts, json), 0, 0},
    {"file", 0, "FILE", "encode the whole file: token count and encode speed", NULL, op_path,
     offsetof(tokenize_opts, file), 0, 0},
    OPT_HELP(tokenize_opts),
};

static int cmd_tokenize(int argc, char **argv)
{
    tokenize_opts to = {0};
    int done = parse_opts(argc, argv, k_tokenize_opts, sizeof k_tokenize_opts / sizeof k_tokenize_opts[0], &to,
                          offsetof(tokenize_opts, help),
                          "Usage: ratiocheck tokenize --model DIR [--add-special] [--json] TEXT...\n"
                          "       ratiocheck tokenize --model DIR --file FILE   (token count and encode speed)\n\n");
    if (done >= 0)
        return done;
    const char *model = to.model, *file = to.file;
    const int json = to.json, special = to.special;
    if (!model)
        return usage_error("%s: --model DIR is required", "tokenize");
    if (optind >= argc && !file)
        return usage_error("%s: no text given", "tokenize");
    /* a model folder (ids checked against its vocab_size) or a folder with
     * only tokenizer.json */
    char *path = rc_path_join(model, "tokenizer.json");
    char *cpath = rc_path_join(model, "config.json");
    rc_config cfg;
    cfg.vocab = 0;
    rc_status st = path && cpath ? RC_OK : rc_errorf(RC_ERR_NOMEM, "out of memory");
    if (st == RC_OK)
        st = rc_model_dir_check(model);
    bool have_cfg = false;
    if (st == RC_OK)
        st = optional_file(cpath, &have_cfg);
    if (st == RC_OK && have_cfg)
        st = rc_config_load(model, &cfg);
    rc_tokenizer *tok = NULL;
    if (st == RC_OK)
        st = rc_tokenizer_load(path, cfg.vocab, &tok);
    free(path);
    free(cpath);
    if (st != RC_OK)
        return fail(st);
    int code = 0;
    if (file) { /* the whole file in one call, timed */
        char *buf;
        size_t len;
        st = rc_read_file(file, &buf, &len, (size_t)1 << 31);
        if (st == RC_OK) {
            int32_t *ids;
            int64_t n;
            double t0 = mono_now();
            st = rc_tokenizer_encode(tok, buf, len, special, &ids, &n);
            double dt = mono_now() - t0;
            if (st == RC_OK) {
                printf("%s: %zu bytes, %lld tokens, %.3f s, %.2f MB/s\n", file, len, (long long)n, dt,
                       (double)len / 1e6 / dt);
                free(ids);
            }
            free(buf);
        }
        if (st != RC_OK)
            code = fail(st);
    }
    for (int a = optind; a < argc && code == 0; a++) {
        int32_t *ids;
        int64_t n;
        st = rc_tokenizer_encode(tok, argv[a], strlen(argv[a]), special, &ids, &n);
        if (st != RC_OK) {
            code = fail(st);
            break;
        }
        if (json) {
            printf("{\"text\": ");
            json_str(stdout, argv[a]);
            printf(", \"ids\": [");
            for (int64_t i = 0; i < n; i++)
                printf("%s%d", i ? ", " : "", ids[i]);
            printf("], \"pieces\": [");
            for (int64_t i = 0; i < n; i++) {
                printf("%s", i ? ", " : "");
                json_str(stdout, rc_tokenizer_piece(tok, ids[i]));
            }
            printf("]}\n");
        } else {
            for (int64_t i = 0; i < n; i++)
                printf("%s%d", i ? " " : "", ids[i]);
            printf("\n");
            for (int64_t i = 0; i < n; i++) {
                printf("%s", i ? " " : "");
                json_str(stdout, rc_tokenizer_piece(tok, ids[i]));
            }
            printf("\n");
        }
        free(ids);
    }
    rc_tokenizer_free(tok);
    return code;
}

/* ---- the ratio check ------------------------------------------------------ */

static volatile int g_interrupted_flag;   /* polled by the run */
static volatile sig_atomic_t g_polling;   /* 1 while the run polls the flag */

/* SIGINT / SIGTERM. Installed first thing in main(). While the run polls the
 * flag it stops cleanly at the next check; otherwise (loading, writing,
 * printing) the process leaves at once: the temporary output file, if one is
 * being written, is removed first. Exit 128 + the signal: 130 for SIGINT, 143
 * for SIGTERM. */
static void on_signal(int sig)
{
    g_signal = sig;
    g_interrupted_flag = 1;
    const char *tmp = rc_h5_temp_path();
    if (tmp) /* interrupted while writing: leave nothing behind */
        unlink(tmp);
    if (tmp || !g_polling) {
        static const char msg[] = "ratiocheck: interrupted\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(128 + sig);
    }
}

static const char *data_dir(void)
{
    const char *env = getenv("RATIOCHECK_DATA");
    return env && *env ? env : RC_SOURCE_DIR "/data";
}

typedef struct {
    bool enabled;
    double start, last; /* start: the first call */
} progress_state;

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "1:05" / "1:02:05" */
static void clock_str(double s, char *buf, size_t n)
{
    const long v = s > 0 && s < 1e7 ? (long)(s + 0.5) : 0;
    if (v >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", v / 3600, v / 60 % 60, v % 60);
    else
        snprintf(buf, n, "%ld:%02ld", v / 60, v % 60);
}

/* [#####-----]  45%  forward L=40   0:12 elapsed, ETA 0:15, 812 tok/s */
static void progress_cb(void *ctx, const char *phase, double frac, int64_t tokens)
{
    progress_state *ps = ctx;
    if (!ps->enabled)
        return;
    double t = mono_now();
    if (ps->start == 0)
        ps->start = t;
    if (t - ps->last < 0.1 && frac < 1.0)
        return;
    ps->last = t;
    frac = frac < 0 ? 0 : frac > 1 ? 1 : frac;
    int width = 30, fill = (int)((double)width * frac);
    char bar[64], el[32], eta[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '-';
    bar[width] = '\0';
    const double elapsed = t - ps->start;
    clock_str(elapsed, el, sizeof el);
    if (frac > 0.01 && elapsed > 1.0)
        clock_str(elapsed * (1.0 - frac) / frac, eta, sizeof eta);
    else
        snprintf(eta, sizeof eta, "--:--");
    fprintf(stderr, "\r[%s] %3.0f%%  %-16s %s elapsed, ETA %s, %.0f tok/s\033[K", bar, 100.0 * frac, phase, el, eta,
            elapsed > 0 ? (double)tokens / elapsed : 0.0);
    fflush(stderr);
}

/* Strict numbers: digits (and a leading '-'), nothing else: no spaces, no
 * '+', no hex, no inf/nan, which strtoll/strtod would quietly accept. */
static bool plain_integer(const char *v)
{
    const char *p = v + (*v == '-');
    if (!*p)
        return false;
    for (; *p; p++)
        if (!isdigit((unsigned char)*p))
            return false;
    return true;
}

static bool plain_decimal(const char *v)
{
    if (!(isdigit((unsigned char)*v) || *v == '-' || *v == '.'))
        return false;
    for (const char *p = v; *p; p++)
        if (!(isdigit((unsigned char)*p) || strchr(".eE+-", *p)))
            return false;
    return true;
}

static rc_status parse_i64(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = plain_integer(v) ? strtoll(v, &end, 10) : 0;
    if (!plain_integer(v) || *end || errno || x < lo || x > hi)
        return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not an integer in [%lld, %lld]", opt, v, (long long)lo,
                         (long long)hi);
    *out = x;
    return RC_OK;
}

static rc_status parse_f64(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = plain_decimal(v) ? strtod(v, &end) : 0;
    if (!plain_decimal(v) || *end || errno || !(x >= lo && x <= hi))
        return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not a number in [%g, %g]", opt, v, lo, hi);
    *out = x;
    return RC_OK;
}

/* one positive integer of --len at *p (digits only), advancing *p */
static bool len_number(const char **p, long long *x)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)**p))
        return false;
    *x = strtoll(*p, &end, 10);
    if (errno || *x < 1 || *x > 1000000)
        return false;
    *p = end;
    return true;
}

/* --len: items joined with ',', each N or a range A:B:xK (A, A*K, ... up to B)
 * or A:B:+K (A, A+K, ... up to B), e.g. 20,40,50 or 64:4096:x2 */
static rc_status parse_lens(const char *v, rc_rollout_cfg *cfg)
{
    cfg->n_lens = 0;
    const char *p = v;
    for (;;) { /* digits only: no spaces, signs or empty items */
        long long a, b = 0, k = 0;
        bool mul = false;
        if (!len_number(&p, &a))
            return rc_errorf(RC_ERR_USAGE, "--len: '%s' is not a list of positive integers like 20,40,50 or a "
                             "range like 64:4096:x2", v);
        if (*p == ':') {
            p++;
            if (!len_number(&p, &b) || *p != ':' || b < a)
                return rc_errorf(RC_ERR_USAGE, "--len: '%s': a range is A:B:xK or A:B:+K with A <= B", v);
            p++;
            mul = *p == 'x';
            if (*p == 'x' || *p == '+')
                p++;
            if (!len_number(&p, &k) || (mul && k < 2))
                return rc_errorf(RC_ERR_USAGE, "--len: '%s': a range's step is xK (K >= 2) or +K (K >= 1)", v);
        }
        if (*p && *p != ',')
            return rc_errorf(RC_ERR_USAGE, "--len: '%s' is not a list of positive integers like 20,40,50 or a "
                             "range like 64:4096:x2", v);
        for (long long x = a;; x = mul ? x * k : x + k) {
            if (cfg->n_lens == RC_MAX_LENS)
                return rc_errorf(RC_ERR_USAGE, "--len: at most %d lengths", RC_MAX_LENS);
            cfg->lens[cfg->n_lens++] = x;
            if (k == 0 || (mul ? x > b / k : x > b - k)) /* the next one would pass B */
                break;
        }
        if (!*p)
            break;
        p++;
    }
    if (cfg->n_lens == 0)
        return rc_errorf(RC_ERR_USAGE, "--len: no lengths given");
    /* sort ascending, reject duplicates */
    for (int i = 1; i < cfg->n_lens; i++)
        for (int j = i; j > 0 && cfg->lens[j] < cfg->lens[j - 1]; j--) {
            int64_t t = cfg->lens[j];
            cfg->lens[j] = cfg->lens[j - 1];
            cfg->lens[j - 1] = t;
        }
    for (int i = 1; i < cfg->n_lens; i++)
        if (cfg->lens[i] == cfg->lens[i - 1])
            return rc_errorf(RC_ERR_USAGE, "--len: %lld is listed twice", (long long)cfg->lens[i]);
    return RC_OK;
}

/* --fail-above metrics: larger is worse */
static const char *const k_gate_metrics[] = {"clipfrac", "k3", "abs_k1", "std", "max_abs_dev",
                                             "mult_prob_err", "nonidentical_frac", "frac_gt_0.001",
                                             "frac_gt_0.01", "frac_gt_0.1", NULL};

static double gate_value(const rc_len_stats *st, const char *metric)
{
    if (!strcmp(metric, "clipfrac")) return st->clipfrac;
    if (!strcmp(metric, "k3")) return st->k3;
    if (!strcmp(metric, "abs_k1")) return fabs(st->k1);
    if (!strcmp(metric, "std")) return st->std;
    if (!strcmp(metric, "max_abs_dev")) return fmax(fabs(st->max - 1.0), fabs(st->min - 1.0));
    if (!strcmp(metric, "mult_prob_err")) return st->mult_prob_err;
    if (!strcmp(metric, "nonidentical_frac")) return 1.0 - st->identical_frac;
    if (!strcmp(metric, "frac_gt_0.001")) return st->frac_above[0];
    if (!strcmp(metric, "frac_gt_0.01")) return st->frac_above[1];
    if (!strcmp(metric, "frac_gt_0.1")) return st->frac_above[2];
    return NAN;
}

#define MAX_GATES 16
typedef struct {
    char metric[32];
    double limit;
} gate;

static rc_status parse_gates(const char *v, gate *g, int *n)
{
    *n = 0;
    const char *p = v;
    if (!*p)
        return rc_errorf(RC_ERR_USAGE, "--fail-above: expected METRIC=VALUE[,...], got an empty list");
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p || *n == MAX_GATES)
            return rc_errorf(RC_ERR_USAGE, "--fail-above: expected METRIC=VALUE[,...], got '%s'", v);
        size_t ml = (size_t)(eq - p);
        if (ml >= sizeof g[0].metric)
            return rc_errorf(RC_ERR_USAGE, "--fail-above: unknown metric '%.*s'", (int)(ml > 40 ? 40 : ml), p);
        memcpy(g[*n].metric, p, ml);
        g[*n].metric[ml] = '\0';
        bool known = false;
        for (int i = 0; k_gate_metrics[i]; i++)
            known |= strcmp(k_gate_metrics[i], g[*n].metric) == 0;
        if (!known)
            return rc_errorf(RC_ERR_USAGE,
                             "--fail-above: unknown metric '%s' (known: clipfrac, k3, abs_k1, std, max_abs_dev, "
                             "mult_prob_err, nonidentical_frac, frac_gt_0.001, frac_gt_0.01, frac_gt_0.1)",
                             g[*n].metric);
        char num[64];
        size_t vl = len - ml - 1;
        if (vl == 0 || vl >= sizeof num)
            return rc_errorf(RC_ERR_USAGE, "--fail-above: bad value for %s", g[*n].metric);
        memcpy(num, eq + 1, vl);
        num[vl] = '\0';
        RC_TRY(parse_f64("--fail-above", num, -1e300, 1e300, &g[*n].limit));
        (*n)++;
        if (!end)
            break;
        p = end + 1; /* an empty item after a comma fails above */
    }
    return RC_OK;
}

static void json_num(FILE *f, const char *key, double v, bool comma)
{
    if (isfinite(v))
        fprintf(f, "\"%s\": %.17g%s", key, v, comma ? ", " : "");
    else
        fprintf(f, "\"%s\": null%s", key, comma ? ", " : "");
}


static const char *const k_objective_labels[RC_N_OBJECTIVES] = {"token PPO", "sequence IS", "GSPO"};

/* "sweep": {"len": L, "rows": [...], "helps_most": the row's name or null} */
static void print_sweep_json(const rc_results *r)
{
    const rc_len_stats *b = rc_results_longest(r);
    printf(", \"sweep\": {\"len\": %lld, \"rows\": [", (long long)r->lens[r->n_lens - 1].len);
    for (int i = 0; i < r->n_sweep; i++) {
        const rc_sweep_row *row = &r->sweep[i];
        printf("%s{\"setting\": ", i ? ", " : "");
        json_str(stdout, row->name);
        printf(", \"sampler\": ");
        json_str(stdout, row->sampler);
        printf(", \"trainer\": ");
        json_str(stdout, row->trainer);
        printf(", \"noise_floor\": %s, \"batch_invariant\": %s, \"skipped\": ", row->noise_floor ? "true" : "false",
               row->invariant ? "true" : "false");
        if (row->res) {
            const rc_len_stats *st = rc_results_longest(row->res);
            printf("null, \"identical_to_base\": %s, ", row->identical ? "true" : "false");
            json_num(stdout, "std", st->std, true);
            json_num(stdout, "k3", st->k3, true);
            json_num(stdout, "clipfrac", st->clipfrac, true);
            json_num(stdout, "mult_prob_err", st->mult_prob_err, true);
            json_num(stdout, "seq_log_ratio_sum_std", st->seq_sum_std, true);
            json_num(stdout, "seq_frac_outside_band", st->seq_frac_outside_band, true);
            json_num(stdout, "seq_frac_above_cap", st->seq_frac_above_cap, true);
            for (size_t k = 0; k < rc_n_corr_stats; k++) /* every correction: one row is cheap */
                json_num(stdout, rc_corr_stats[k].name, rc_corr_value(&st->corr, &rc_corr_stats[k]), true);
            json_num(stdout, "std_vs_base", st->std / b->std, false);
        } else {
            json_str(stdout, row->skipped);
        }
        putchar('}');
    }
    printf("], \"helps_most\": ");
    if (r->sweep_best >= 0)
        json_str(stdout, r->sweep[r->sweep_best].name);
    else
        printf("null");
    printf(", \"helps_most_without_invariant_kernels\": ");
    if (r->sweep_best_other >= 0)
        json_str(stdout, r->sweep[r->sweep_best_other].name);
    else
        printf("null");
    putchar('}');
}

/* gates: -1 no --fail-above, 0 every gate holds, 1 one failed */
typedef struct {
    const rc_tokenizer *tok;
    const int64_t *idx; /* sequences to show, or NULL */
    int64_t n;
} show_sel;
static void print_show_json(const rc_results *r, const rc_tokenizer *tok, const int64_t *idx, int64_t n);

/* "strata": {"prob": {...}, "entropy": {...} or null} of one length (README "Strata") */
static void print_strata_json(const rc_len_stats *st)
{
    printf("\"strata\": {");
    for (int k = 0; k < RC_N_STRATA; k++) {
        const rc_strata *sa = &st->strata[k];
        printf("%s\"%s\": ", k ? ", " : "", rc_strata_names[k]);
        if (!sa->present) {
            printf("null");
            continue;
        }
        printf("{\"count\": %lld, \"edges\": [", (long long)sa->count);
        for (int e = 0; e < RC_N_DECILES - 1; e++) {
            if (isfinite(sa->edges[e]))
                printf("%s%.17g", e ? ", " : "", sa->edges[e]);
            else
                printf("%snull", e ? ", " : "");
        }
        printf("], \"deciles\": [");
        for (int b = 0; b < RC_N_DECILES; b++) {
            printf("%s{\"decile\": %d, \"count\": %lld, ", b ? ", " : "", b, (long long)sa->bin[b].count);
            for (size_t f = 0; f < rc_n_stratum_fields; f++)
                json_num(stdout, rc_stratum_fields[f].name, rc_stratum_value(&sa->bin[b], &rc_stratum_fields[f]),
                         f + 1 < rc_n_stratum_fields);
            printf("}");
        }
        printf("]}");
    }
    printf("}, ");
}

/* "growth": var(S) against L and its fit (README "Growth") */
static void print_growth_json(const rc_growth *g)
{
    printf("\"growth\": {\"points\": %d, ", g->n_points);
    json_num(stdout, "exponent", g->exponent, true);
    json_num(stdout, "log_coef", g->log_coef, true);
    json_num(stdout, "r2", g->r2, true);
    printf("\"looks_like\": ");
    json_str(stdout, g->looks_like);
    printf(", ");
    json_num(stdout, "cap", g->cap, true);
    json_num(stdout, "cap_length", g->cap_length, true);
    printf("\"reason\": ");
    json_str(stdout, g->reason);
    printf("}");
}

/* the run had a reference pass (a chunked score holds its statistics, not its tensor) */
static bool has_reference(const rc_results *r)
{
    return r->logprob_ref || !strcmp(r->reference, "fp32") || !strcmp(r->reference, "fp64");
}

static void print_json(const rc_results *r, const char *out_path, int gates, const show_sel *show)
{
    for (size_t i = 0; i < rc_n_settings; i++) { /* the run's settings (results.h), in their order */
        const rc_setting *set = &rc_settings[i];
        const char *at = (const char *)r + set->off;
        if (!set->json_key)
            continue;
        printf("%s\"%s\": ", i ? ", " : "{", set->json_key);
        switch (set->kind) {
        case RC_SET_TEXT: json_str(stdout, rc_setting_text(r, set)); break;
        case RC_SET_I64: printf("%lld", (long long)*(const int64_t *)(const void *)at); break;
        case RC_SET_F64: printf("%.17g", *(const double *)(const void *)at); break;
        case RC_SET_BOOL: fputs(*(const bool *)(const void *)at ? "true" : "false", stdout); break;
        }
    }
    printf(", \"prompts\": %lld, \"sequences\": %lld, \"output\": ", (long long)r->n_prompts, (long long)r->n_seq);
    if (out_path)
        json_str(stdout, out_path);
    else
        printf("null");
    printf(", \"lens\": [");
    for (int i = 0; i < r->n_lens; i++) {
        const rc_len_stats *st = &r->lens[i].st;
        printf("%s{\"len\": %lld, \"count\": %lld, ", i ? ", " : "", (long long)r->lens[i].len, (long long)st->count);
        json_num(stdout, "mean", st->mean, true);
        json_num(stdout, "std", st->std, true);
        json_num(stdout, "min", st->min, true);
        json_num(stdout, "max", st->max, true);
        json_num(stdout, "k1", st->k1, true);
        json_num(stdout, "k3", st->k3, true);
        json_num(stdout, "clipfrac", st->clipfrac, true);
        json_num(stdout, "frac_gt_0.001", st->frac_above[0], true);
        json_num(stdout, "frac_gt_0.01", st->frac_above[1], true);
        json_num(stdout, "frac_gt_0.1", st->frac_above[2], true);
        json_num(stdout, "mult_prob_err", st->mult_prob_err, true);
        json_num(stdout, "identical_frac", st->identical_frac, true);
        printf("\"seq_count\": %lld, ", (long long)st->seq_count);
        json_num(stdout, "seq_log_ratio_sum_mean", st->seq_sum_mean, true);
        json_num(stdout, "seq_log_ratio_sum_std", st->seq_sum_std, true);
        json_num(stdout, "seq_log_ratio_sum_min", st->seq_sum_min, true);
        json_num(stdout, "seq_log_ratio_sum_max", st->seq_sum_max, true);
        json_num(stdout, "seq_log_ratio_mean_mean", st->seq_mean_mean, true);
        json_num(stdout, "seq_log_ratio_mean_std", st->seq_mean_std, true);
        json_num(stdout, "seq_log_ratio_mean_min", st->seq_mean_min, true);
        json_num(stdout, "seq_log_ratio_mean_max", st->seq_mean_max, true);
        json_num(stdout, "seq_ratio_min", exp(st->seq_sum_min), true);
        json_num(stdout, "seq_ratio_max", exp(st->seq_sum_max), true);
        json_num(stdout, "seq_frac_outside_band", st->seq_frac_outside_band, true);
        json_num(stdout, "seq_frac_above_cap", st->seq_frac_above_cap, true);
        for (size_t k = 0; k < rc_n_corr_stats; k++) /* the corrections, under their names (stats.c) */
            json_num(stdout, rc_corr_stats[k].name, rc_corr_value(&st->corr, &rc_corr_stats[k]), true);
        if (has_reference(r)) {
            json_num(stdout, "ref_gen_mean_abs", st->ref_gen_mean_abs, true);
            json_num(stdout, "ref_fwd_mean_abs", st->ref_fwd_mean_abs, true);
        }
        print_strata_json(st);
        printf("\"first_divergent_position\": %lld}", (long long)st->first_divergent_position);
    }
    printf("], \"cross_length\": [");
    for (int i = 0; i < r->n_cross; i++) {
        const rc_cross_len *c = &r->cross[i];
        printf("%s{\"len_a\": %lld, \"len_b\": %lld, \"count\": %lld, ", i ? ", " : "", (long long)c->len_a,
               (long long)c->len_b, (long long)c->count);
        json_num(stdout, "max_abs", c->max_abs, true);
        json_num(stdout, "mean_abs", c->mean_abs, false);
        printf("}");
    }
    printf("], ");
    print_growth_json(&r->growth);
    const rc_verdict *v = &r->verdict;
    printf(", \"verdict\": {");
    for (int o = 0; o < RC_N_OBJECTIVES; o++) {
        printf("\"%s\": {\"level\": \"%s\", \"reason\": ", rc_objective_names[o], rc_verdict_name(v->level[o]));
        json_str(stdout, v->reason[o]);
        printf("}, ");
    }
    printf("\"len\": %lld, \"worst_token\": {\"sequence\": %lld, \"position\": %lld, ", (long long)v->len,
           (long long)v->worst_token_seq, (long long)v->worst_token_pos);
    json_num(stdout, "ratio", v->worst_token_ratio, false);
    printf("}, \"worst_sequence\": {\"sequence\": %lld, ", (long long)v->worst_seq);
    json_num(stdout, "seq_ratio", v->worst_seq_ratio, false);
    printf("}}");
    if (gates >= 0)
        printf(", \"gates\": \"%s\"", gates ? "FAIL" : "PASS");
    if (r->n_sweep > 0)
        print_sweep_json(r);
    if (show && show->idx)
        print_show_json(r, show->tok, show->idx, show->n);
    printf(", \"seconds_generate\": %.3f, \"seconds_forward\": %.3f, \"seconds_reference\": %.3f, \"seconds\": %.3f}\n",
           r->seconds_generate, r->seconds_forward, r->seconds_reference, r->seconds_total);
}

/* `ratiocheck sweep`: one row per setting at the longest length, and the
 * setting that lowers k3 the most */
static void print_sweep_table(const rc_results *r)
{
    const rc_len_stats *b = rc_results_longest(r);
    printf("\nsweep: the same %lld rollouts replayed, one setting changed from the base (L=%lld; std vs base: "
           "ratio of the stds)\n",
           (long long)r->n_seq, (long long)r->lens[r->n_lens - 1].len);
    printf("%-34s %10s %10s %9s %9s %9s %8s %11s\n", "setting", "std", "k3", "clipfrac", "exp|d|", "GSPO out",
           "e^S>cap", "std vs base");
    printf("%-34s %10.3e %10.3e %9.5f %9.5f %9.4f %8.4f %11s\n", "base", b->std, b->k3, b->clipfrac,
           b->mult_prob_err, b->seq_frac_outside_band, b->seq_frac_above_cap, "1");
    for (int i = 0; i < r->n_sweep; i++) {
        const rc_sweep_row *row = &r->sweep[i];
        const char *name = row->name;
        if (!row->res) {
            printf("%-34s skipped: ", name);
            term_str(stdout, row->skipped);
            putchar('\n');
            continue;
        }
        const rc_len_stats *st = rc_results_longest(row->res);
        char rel[24];
        if (row->identical)
            snprintf(rel, sizeof rel, "identical");
        else if (b->std > 0)
            snprintf(rel, sizeof rel, "%.3g", st->std / b->std);
        else
            snprintf(rel, sizeof rel, "(base 0)");
        printf("%-34s %10.3e %10.3e %9.5f %9.5f %9.4f %8.4f %11s\n", name, st->std, st->k3, st->clipfrac,
               st->mult_prob_err, st->seq_frac_outside_band, st->seq_frac_above_cap, rel);
    }
    for (int i = 0; i < r->n_sweep; i++)
        if (r->sweep[i].noise_floor && r->sweep[i].res)
            printf("noise floor: the base replayed %s\n",
                   r->sweep[i].identical ? "is bitwise identical to it (every difference above is the setting's)"
                                         : "DIFFERS from it: the replay is not deterministic, read the rows with care");
    if (r->sweep_best >= 0) {
        const rc_len_stats *st = rc_results_longest(r->sweep[r->sweep_best].res);
        printf("helps most: %s: k3 %.3g -> %.3g, ratio std %.3g -> %.3g, outside GSPO's band %.1f%% -> %.1f%%\n",
               r->sweep[r->sweep_best].name, b->k3, st->k3, b->std, st->std, 100.0 * b->seq_frac_outside_band,
               100.0 * st->seq_frac_outside_band);
    } else {
        printf("helps most: no setting lowers k3 below the base's\n");
    }
    if (r->sweep_best >= 0 && r->sweep[r->sweep_best].invariant && r->sweep_best_other >= 0) {
        const rc_len_stats *st = rc_results_longest(r->sweep[r->sweep_best_other].res);
        printf("without batch-invariant kernels: %s: k3 %.3g -> %.3g, ratio std %.3g -> %.3g, outside GSPO's band "
               "%.1f%% -> %.1f%%\n",
               r->sweep[r->sweep_best_other].name, b->k3, st->k3, b->std, st->std, 100.0 * b->seq_frac_outside_band,
               100.0 * st->seq_frac_outside_band);
    }
}

/* The published corrections at their defaults (README "Corrections"): one
 * row per correction, one column per length; fractions in percent. */
static void print_corrections(const rc_results *r)
{
    printf("\ncorrections at step 0: what each published correction would clip or mask at its default "
           "(README \"Corrections\")\n");
    printf("  %-30s %-34s", "correction", "clips / masks");
    for (int i = 0; i < r->n_lens; i++) {
        char h[24];
        snprintf(h, sizeof h, "L=%lld", (long long)r->lens[i].len);
        printf(" %10s", h);
    }
    putchar('\n');
    for (int kind = RC_CORR_TOKENS; kind <= RC_CORR_METRIC; kind++) {
        if (kind == RC_CORR_TOKENS)
            printf("  of the tokens:\n");
        else if (kind == RC_CORR_SEQUENCES)
            printf("  of the sequences:\n");
        else if (kind == RC_CORR_METRIC)
            printf("mismatch metrics (verl rollout_corr/, TRL sampling/; verl's kl and k3_kl are k1 and k3 above, "
                   "prime-rl's mismatch_kl is k3)\n");
        for (size_t k = 0; k < rc_n_corr_stats; k++) {
            const rc_corr_stat *e = &rc_corr_stats[k];
            if ((int)e->kind != kind || !e->table)
                continue;
            printf("  %-30s %-34s", e->label, e->rule);
            for (int i = 0; i < r->n_lens; i++) {
                const double v = rc_corr_value(&r->lens[i].st.corr, e);
                char cell[32];
                if (kind == RC_CORR_METRIC)
                    snprintf(cell, sizeof cell, "%.3e", v);
                else if (v == 0)
                    snprintf(cell, sizeof cell, "0");
                else
                    snprintf(cell, sizeof cell, "%.3g%%", 100.0 * v);
                printf(" %10s", cell);
            }
            putchar('\n');
        }
    }
}

/* growth of var(S) with L (README "Growth"): a few lines, always */
static void print_growth(const rc_results *r)
{
    const rc_growth *g = &r->growth;
    printf("\ngrowth of S with L (README \"Growth\"): ");
    if (!isfinite(g->exponent)) {
        printf("n/a: %s\n", g->reason);
        return;
    }
    printf("var(S) = %.3g x L^%.3f, least squares in log-log over %d lengths", exp(g->log_coef), g->exponent,
           g->n_points);
    if (isfinite(g->r2))
        printf(" (r^2 %.3f)", g->r2);
    const bool like = !strcmp(g->looks_like, "sqrt(L)") || !strcmp(g->looks_like, "L");
    printf("\n  std(S) ~ L^%.2f: %s%s (sqrt(L): independent token errors, L: correlated ones)\n", g->exponent / 2.0,
           like ? "like " : "", g->looks_like);
    if (isfinite(g->cap_length))
        printf("  sequence IS cap e^S > %g: std(S) reaches log %g = %.3f at L ~ %.3g (extrapolated)\n", g->cap,
               g->cap, log(g->cap), g->cap_length);
    else
        printf("  sequence IS cap e^S > %g: n/a: %s\n", g->cap, g->reason);
}

/* --by prob / entropy: the deciles of the longest length (README "Strata") */
static void print_strata(const rc_results *r, unsigned by)
{
    const rc_len_result *L = &r->lens[r->n_lens - 1];
    for (int k = 0; k < RC_N_STRATA; k++) {
        if (!(by & (1u << k)))
            continue;
        const rc_strata *sa = &L->st.strata[k];
        const bool prob = k == RC_STRATA_PROB;
        printf("\nstrata at L=%lld: log r by decile of %s (README \"Strata\"; JSON and HDF5: every length)\n",
               (long long)L->len,
               prob ? "the sampler's probability p of the token (0: least likely)"
                    : "the entropy of the sampler's distribution, nats (0: most certain)");
        if (!sa->present) {
            printf("  n/a: this file has no /rollouts/entropy (written before it)\n");
            continue;
        }
        printf("  %6s %9s %9s %7s %11s %11s %11s %11s %9s %10s %7s\n", "decile", prob ? "p from" : "H from",
               prob ? "p to" : "H to", "tokens", "mean|log r|", "max|log r|", "mean log r", "std log r", "clipfrac",
               "k3", "share");
        for (int b = 0; b < RC_N_DECILES; b++) {
            const rc_stratum *x = &sa->bin[b];
            if (x->count == 0) {
                printf("  %6d %9s %9s %7d   (empty: its edge equals the next one's)\n", b, "", "", 0);
                continue;
            }
            printf("  %6d %9.3g %9.3g %7lld %11.3e %11.3e %11.3e %11.3e %9.5f %10.3e %6.1f%%\n", b, x->lo, x->hi,
                   (long long)x->count, x->mean_abs_log_ratio, x->max_abs_log_ratio, x->mean_log_ratio,
                   x->std_log_ratio, x->clipfrac, x->k3, 100.0 * x->share_abs_log_ratio);
        }
        /* the field finding: low-p (high-entropy) tokens carry more of the gap */
        int lo = 0, hi = RC_N_DECILES - 1;
        while (lo < hi && sa->bin[lo].count == 0)
            lo++;
        while (hi > lo && sa->bin[hi].count == 0)
            hi--;
        const rc_stratum *a = &sa->bin[prob ? lo : hi], *z = &sa->bin[prob ? hi : lo];
        printf("  mean |log r| of the %s decile over the %s one's: ", prob ? "least likely" : "highest-entropy",
               prob ? "most likely" : "lowest-entropy");
        if (z->mean_abs_log_ratio > 0)
            printf("%.3gx\n", a->mean_abs_log_ratio / z->mean_abs_log_ratio);
        else
            printf("%s (%.3e against 0)\n", a->mean_abs_log_ratio > 0 ? "unbounded" : "both 0",
                   a->mean_abs_log_ratio);
    }
}

static void print_table(const rc_results *r, const char *out_path, int gates, unsigned by)
{
    printf("ratiocheck %s  model ", RC_VERSION);
    term_str(stdout, r->model_path ? r->model_path : "");
    fputs(" (", stdout);
    term_str(stdout, r->model_type);
    fputs(")", stdout);
    /* the settings the header shows, from the one settings table (stats.c) */
    for (size_t i = 0; i < rc_n_settings; i++) {
        const rc_setting *s = &rc_settings[i];
        if (!s->table_label)
            continue;
        const char *v = rc_setting_text(r, s);
        if (!v[0] || (s->table_hide && strcmp(v, s->table_hide) == 0))
            continue;
        printf("  %s ", s->table_label);
        term_str(stdout, v);
    }
    putchar('\n');
    if (r->device[0]) {
        printf("backend ");
        term_str(stdout, r->backend);
        printf(": ");
        term_str(stdout, r->device);
        putchar('\n');
    }
    /* a score run's sequences are the file's rollouts, each its own prompt (its sampler is "logged (...)") */
    if (!strncmp(r->sampler, "logged (", 8))
        printf("%lld rollouts, temperature %g, top-k %lld, top-p %g, seed %lld\n\n", (long long)r->n_seq,
               r->temperature, (long long)r->top_k, r->top_p, (long long)r->seed);
    else
        printf("%lld sequences (%lld prompts x %lld samples), temperature %g, top-k %lld, top-p %g, seed %lld\n\n",
               (long long)r->n_seq, (long long)r->n_prompts, (long long)r->samples, r->temperature,
               (long long)r->top_k, r->top_p, (long long)r->seed);
    printf("ratio = exp(forward - generation) per generated token; clipfrac: ratio outside [%g, %g]\n",
           1.0 - r->stat.clip_eps_low, 1.0 + r->stat.clip_eps_high);
    printf("%5s %8s %10s %10s %9s %9s %9s %10s %9s %9s\n", "L", "tokens", "mean", "std", "min", "max", "clipfrac",
           "k3", "identical", "first div");
    for (int i = 0; i < r->n_lens; i++) {
        const rc_len_stats *st = &r->lens[i].st;
        char fd[24];
        if (st->first_divergent_position < 0)
            snprintf(fd, sizeof fd, "none");
        else
            snprintf(fd, sizeof fd, "at %lld", (long long)st->first_divergent_position);
        printf("%5lld %8lld %10.6f %10.3e %9.5f %9.5f %9.5f %10.3e %9.4f %9s\n", (long long)r->lens[i].len,
               (long long)st->count, st->mean, st->std, st->min, st->max, st->clipfrac, st->k3,
               st->identical_frac, fd);
    }
    printf("identical: tokens whose two log-probs are bitwise equal; first div: the first generated position "
           "(0-based) where any\nsequence's two log-probs differ, none when every one is equal\n");
    printf("\nper sequence: S = sum of log ratio over its tokens (sequence ratio e^S), M = S / tokens (GSPO's "
           "e^M)\n");
    char band[32], cap[32];
    snprintf(band, sizeof band, "|e^M-1|>%g", r->stat.seq_eps);
    snprintf(cap, sizeof cap, "e^S>%g", r->stat.seq_cap);
    printf("%5s %6s %10s %10s %10s %10s %12s %10s\n", "L", "seqs", "mean S", "std S", "min e^S", "max e^S", band, cap);
    for (int i = 0; i < r->n_lens; i++) {
        const rc_len_stats *st = &r->lens[i].st;
        printf("%5lld %6lld %10.3e %10.3e %10.5f %10.5f %12.4f %10.4f\n", (long long)r->lens[i].len,
               (long long)st->seq_count, st->seq_sum_mean, st->seq_sum_std, exp(st->seq_sum_min), exp(st->seq_sum_max),
               st->seq_frac_outside_band, st->seq_frac_above_cap);
    }
    print_growth(r);
    print_corrections(r);
    if (by)
        print_strata(r, by);
    if (r->n_cross > 0) {
        printf("\nforward log-prob of the same token, re-scored with different lengths (shared positions)\n");
        printf("%5s %5s %8s %12s %12s\n", "La", "Lb", "tokens", "max |diff|", "mean |diff|");
        for (int i = 0; i < r->n_cross; i++)
            printf("%5lld %5lld %8lld %12.3e %12.3e\n", (long long)r->cross[i].len_a, (long long)r->cross[i].len_b,
                   (long long)r->cross[i].count, r->cross[i].max_abs, r->cross[i].mean_abs);
    }
    if (has_reference(r)) {
        printf("\nagainst the %s reference (mean / max |log-prob - reference|)\n", r->reference);
        printf("%5s %24s %24s\n", "L", "generation", "forward");
        for (int i = 0; i < r->n_lens; i++) {
            const rc_len_stats *st = &r->lens[i].st;
            printf("%5lld %11.3e / %10.3e %11.3e / %10.3e\n", (long long)r->lens[i].len, st->ref_gen_mean_abs,
                   st->ref_gen_max_abs, st->ref_fwd_mean_abs, st->ref_fwd_max_abs);
        }
    }
    const rc_verdict *v = &r->verdict;
    printf("\nverdict (README \"Verdict\": FAIL past a published gate or when more than %g%% would be clipped "
           "or masked at step 0, WARN when any would be)\n",
           100.0 * RC_VERDICT_FAIL_FRAC);
    for (int o = 0; o < RC_N_OBJECTIVES; o++)
        printf("  %-12s %-4s  %s\n", k_objective_labels[o], rc_verdict_name(v->level[o]), v->reason[o]);
    if (v->worst_token_seq >= 0 && v->worst_token_ratio == 1.0)
        printf("  every ratio is exactly 1\n");
    else if (v->worst_token_seq >= 0)
        printf("  worst token: sequence %lld, position %lld, ratio %.6g; worst sequence: %lld, e^S %.6g (L=%lld, "
               "0-based)\n",
               (long long)v->worst_token_seq, (long long)v->worst_token_pos, v->worst_token_ratio,
               (long long)v->worst_seq, v->worst_seq_ratio, (long long)v->len);
    if (gates >= 0)
        printf("gates (--fail-above): %s\n", gates ? "FAIL (the metrics above the limits are on stderr)" : "PASS");
    if (r->n_sweep > 0)
        print_sweep_table(r);
    printf("\n%.1f s (generation %.1f s, re-scoring %.1f s", r->seconds_total, r->seconds_generate,
           r->seconds_forward);
    if (r->seconds_reference > 0)
        printf(", %s reference %.1f s", r->reference, r->seconds_reference);
    printf(")%s", out_path ? ", written to " : "");
    term_str(stdout, out_path ? out_path : "");
    putchar('\n');
}

/* --show N / --show-worst N: which sequences, in order: the first N, or the
 * N with the largest |S| (sum of log r at the longest length), largest first */
static int64_t *show_pick(const rc_results *r, int64_t first, int64_t worst, int64_t *n_out)
{
    const rc_len_result *L = &r->lens[r->n_lens - 1];
    int64_t n = first > 0 ? first : worst;
    if (n > r->n_seq)
        n = r->n_seq;
    int64_t *idx = malloc((size_t)(r->n_seq > 0 ? r->n_seq : 1) * sizeof *idx);
    if (!idx)
        return NULL;
    for (int64_t q = 0; q < r->n_seq; q++)
        idx[q] = q;
    if (worst > 0) /* insertion sort by |S|, descending, NaN last; stable for ties */
        for (int64_t i = 1; i < r->n_seq; i++) {
            const int64_t v = idx[i];
            const double a = fabs(L->seq_log_ratio_sum[v]);
            int64_t j = i;
            while (j > 0) {
                const double b = fabs(L->seq_log_ratio_sum[idx[j - 1]]);
                if (!(isnan(b) || (!isnan(a) && a > b)))
                    break;
                idx[j] = idx[j - 1];
                j--;
            }
            idx[j] = v;
        }
    *n_out = n;
    return idx;
}

/* the 3 positions of sequence q with the largest |log r| at length L (-1: none) */
static void worst3(const rc_results *r, const rc_len_result *L, int64_t q, int64_t valid, int64_t worst[3])
{
    worst[0] = worst[1] = worst[2] = -1;
    double wv[3] = {-1.0, -1.0, -1.0};
    for (int64_t t = 0; t < valid; t++) {
        const double lr = fabs((double)L->logprob_fwd[q * L->len + t] - (double)r->logprob_gen[q * r->gen_len + t]);
        if (!(lr > 0))
            continue;
        for (int k = 0; k < 3; k++)
            if (lr > wv[k]) {
                for (int j = 2; j > k; j--) {
                    worst[j] = worst[j - 1];
                    wv[j] = wv[j - 1];
                }
                worst[k] = t;
                wv[k] = lr;
                break;
            }
    }
}

/* a ratio with the digits that tell it from 1 and from its neighbours:
 * "1" when exact, else 1 + (r - 1) with r - 1 to 3 significant digits */
static void ratio_str(double lr, char *buf, size_t n)
{
    if (lr == 0.0)
        snprintf(buf, n, "1");
    else
        snprintf(buf, n, "1%+.2e", expm1(lr));
}

/* the completions as text: one line per sequence, every token with its ratio */
static void print_show(const rc_results *r, const rc_tokenizer *tok, const int64_t *idx, int64_t n, bool worst_first)
{
    const rc_len_result *L = &r->lens[r->n_lens - 1];
    printf("\ncompletions (%s; ratio at L=%lld as 1+(r-1); the 3 tokens with the largest |log ratio| marked "
           ">>like this<<; indices 0-based as in the HDF5 file)\n",
           worst_first ? "the sequences with the largest |S| first" : "the first sequences", (long long)L->len);
    for (int64_t i = 0; i < n; i++) {
        const int64_t q = idx[i], p = r->seq_prompt[q], valid = r->gen_valid[q] < L->len ? r->gen_valid[q] : L->len;
        int64_t worst[3];
        worst3(r, L, q, valid, worst);
        printf("\n[sequence %lld] prompt_index %lld, sample_index %d, S %.4g (e^S %.6g): ", (long long)q,
               (long long)p, r->seq_sample[q], L->seq_log_ratio_sum[q], exp(L->seq_log_ratio_sum[q]));
        if (r->prompt_text && r->prompt_text[p])
            json_str(stdout, r->prompt_text[p]);
        else
            printf("(%d token ids)", r->prompt_len[p]);
        printf("\n    ");
        for (int64_t t = 0; t < valid; t++) {
            int32_t id = r->gen_tokens[q * r->gen_len + t];
            char *piece = NULL;
            if (!tok || rc_tokenizer_decode(tok, &id, 1, false, &piece, NULL) != RC_OK) {
                free(piece);
                piece = NULL;
            }
            char rs[32];
            ratio_str((double)L->logprob_fwd[q * L->len + t] - (double)r->logprob_gen[q * r->gen_len + t], rs,
                      sizeof rs);
            bool marked = t == worst[0] || t == worst[1] || t == worst[2];
            char idbuf[16];
            snprintf(idbuf, sizeof idbuf, "#%d", id);
            printf("%s", marked ? ">>" : "");
            for (const char *c = piece ? piece : idbuf; *c; c++) /* keep one line per completion */
                if (*c == '\n')
                    fputs("\\n", stdout);
                else if (*c == '\t')
                    fputs("\\t", stdout);
                else
                    putchar((unsigned char)*c < 0x20 ? '?' : *c);
            printf("%s(%s) ", marked ? "<<" : "", rs);
            free(piece);
        }
        printf("\n");
    }
}

/* the same, as the JSON key "completions" (--json with --show / --show-worst) */
static void print_show_json(const rc_results *r, const rc_tokenizer *tok, const int64_t *idx, int64_t n)
{
    const rc_len_result *L = &r->lens[r->n_lens - 1];
    printf(", \"completions\": {\"len\": %lld, \"sequences\": [", (long long)L->len);
    for (int64_t i = 0; i < n; i++) {
        const int64_t q = idx[i], p = r->seq_prompt[q], valid = r->gen_valid[q] < L->len ? r->gen_valid[q] : L->len;
        int64_t worst[3];
        worst3(r, L, q, valid, worst);
        printf("%s{\"sequence\": %lld, \"prompt_index\": %lld, \"sample_index\": %d, ", i ? ", " : "",
               (long long)q, (long long)p, r->seq_sample[q]);
        json_num(stdout, "seq_log_ratio_sum", L->seq_log_ratio_sum[q], true);
        printf("\"tokens\": [");
        for (int64_t t = 0; t < valid; t++)
            printf("%s%d", t ? ", " : "", r->gen_tokens[q * r->gen_len + t]);
        printf("], \"pieces\": [");
        for (int64_t t = 0; t < valid; t++) {
            int32_t id = r->gen_tokens[q * r->gen_len + t];
            char *piece = NULL;
            if (tok && rc_tokenizer_decode(tok, &id, 1, false, &piece, NULL) == RC_OK && piece) {
                printf("%s", t ? ", " : "");
                json_str(stdout, piece);
            } else {
                printf("%snull", t ? ", " : "");
            }
            free(piece);
        }
        printf("], \"log_ratio\": [");
        for (int64_t t = 0; t < valid; t++)
            printf("%s%.9g", t ? ", " : "",
                   (double)L->logprob_fwd[q * L->len + t] - (double)r->logprob_gen[q * r->gen_len + t]);
        printf("], \"worst_positions\": [");
        for (int k = 0, m = 0; k < 3; k++)
            if (worst[k] >= 0)
                printf("%s%lld", m++ ? ", " : "", (long long)worst[k]);
        printf("]}");
    }
    printf("]}");
}

/* ---- report and diff ------------------------------------------------------ */

/* options of report / diff: --json and --help */
typedef struct {
    bool json, help;
} results_opts;

static const opt_spec k_results_opts[] = {
    {"json", 0, NULL, "print one JSON object instead of the table", NULL, op_flag, offsetof(results_opts, json), 0,
     0},
    OPT_HELP(results_opts),
};

static int parse_json_flag(int argc, char **argv, const char *usage, int *json)
{
    results_opts ro = {0};
    int code = parse_opts(argc, argv, k_results_opts, sizeof k_results_opts / sizeof k_results_opts[0], &ro,
                          offsetof(results_opts, help), usage);
    *json = ro.json;
    return code;
}

typedef struct {
    bool json, help;
    unsigned by;
} report_opts;

static const opt_spec k_report_opts[] = {
    {"json", 0, NULL, "print one JSON object instead of the table", NULL, op_flag, offsetof(report_opts, json), 0,
     0},
    {"by", 0, "prob|entropy|prob,entropy", "also print the strata tables, as run --by", NULL, op_by,
     offsetof(report_opts, by), 0, 0},
    OPT_HELP(report_opts),
};

static int cmd_report(int argc, char **argv)
{
    report_opts ro = {0};
    int code = parse_opts(argc, argv, k_report_opts, sizeof k_report_opts / sizeof k_report_opts[0], &ro,
                          offsetof(report_opts, help),
                          "Usage: ratiocheck report FILE.h5 [--json] [--by prob,entropy]\n\nThe run's summary "
                          "again, from the file alone.\n\n");
    const int json = ro.json;
    const unsigned by = ro.by;
    if (code >= 0)
        return code;
    if (optind != argc - 1)
        return usage_error("%s: give exactly one result file", "report");
    rc_results r;
    rc_status st = rc_h5_read(argv[optind], &r);
    if (st != RC_OK)
        return fail(st);
    if (json)
        print_json(&r, argv[optind], -1, NULL);
    else
        print_table(&r, argv[optind], -1, by);
    rc_results_free(&r);
    return 0;
}

/* max / mean |a - b| and the bitwise-equal fraction over valid tokens */
typedef struct {
    double max_abs, mean_abs, identical;
    int64_t n;
} tokdiff;

static tokdiff diff_tokens(const rc_results *A, const float *a, const float *b, int64_t stride, int64_t L)
{
    tokdiff d = {0, 0, 0, 0};
    int64_t same = 0;
    for (int64_t q = 0; q < A->n_seq; q++) {
        int64_t valid = A->gen_valid[q] < L ? A->gen_valid[q] : L;
        for (int64_t t = 0; t < valid; t++) {
            float x = a[q * stride + t], y = b[q * stride + t];
            double e = fabs((double)x - (double)y);
            d.max_abs = e > d.max_abs ? e : d.max_abs;
            d.mean_abs += e;
            same += memcmp(&x, &y, sizeof x) == 0;
            d.n++;
        }
    }
    if (d.n) {
        d.mean_abs /= (double)d.n;
        d.identical = (double)same / (double)d.n;
    } else {
        d.max_abs = d.mean_abs = d.identical = NAN;
    }
    return d;
}

static int cmd_diff(int argc, char **argv)
{
    int json = 0, code = parse_json_flag(argc, argv,
                                         "Usage: ratiocheck diff A.h5 B.h5 [--json]\n\nTwo runs over the same "
                                         "tokens, side by side.\n\n",
                                         &json);
    if (code >= 0)
        return code;
    if (optind != argc - 2)
        return usage_error("%s: give exactly two result files", "diff");
    const char *pa = argv[optind], *pb = argv[optind + 1];
    rc_results A, B;
    rc_status st = rc_h5_read(pa, &A);
    if (st != RC_OK)
        return fail(st);
    st = rc_h5_read(pb, &B);
    if (st != RC_OK) {
        rc_results_free(&A);
        return fail(st);
    }
    /* the same tokens, or nothing to compare */
    if (A.n_seq != B.n_seq || A.gen_len != B.gen_len || A.n_prompts != B.n_prompts || A.prompt_max != B.prompt_max)
        st = rc_errorf(RC_ERR_USAGE, "%s and %s are not runs over the same tokens (%lld x %lld vs %lld x %lld generated)",
                       pa, pb, (long long)A.n_seq, (long long)A.gen_len, (long long)B.n_seq, (long long)B.gen_len);
    for (int64_t i = 0; st == RC_OK && i < A.n_prompts * A.prompt_max; i++)
        if (A.prompt_tokens[i] != B.prompt_tokens[i])
            st = rc_errorf(RC_ERR_USAGE, "%s and %s are not runs over the same tokens (prompt %lld differs)", pa, pb,
                           (long long)(i / A.prompt_max) + 1);
    for (int64_t i = 0; st == RC_OK && i < A.n_seq * A.gen_len; i++)
        if (A.gen_tokens[i] != B.gen_tokens[i])
            st = rc_errorf(RC_ERR_USAGE,
                           "%s and %s are not runs over the same tokens (sequence %lld, generated position %lld differs)",
                           pa, pb, (long long)(i / A.gen_len), (long long)(i % A.gen_len));
    if (st != RC_OK) {
        rc_results_free(&A);
        rc_results_free(&B);
        return fail(st);
    }
    tokdiff g = diff_tokens(&A, A.logprob_gen, B.logprob_gen, A.gen_len, A.gen_len);
    if (json) {
        const char *const kv[][2] = {{"a", pa}, {"b", pb}, {"a_dtype", A.dtype}, {"b_dtype", B.dtype},
                                     {"a_kernels", A.kernels}, {"b_kernels", B.kernels}};
        for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
            printf("%s\"%s\": ", i ? ", " : "{", kv[i][0]);
            json_str(stdout, kv[i][1]);
        }
        printf(", \"generation\": {");
        json_num(stdout, "max_abs", g.max_abs, true);
        json_num(stdout, "mean_abs", g.mean_abs, true);
        json_num(stdout, "identical_frac", g.identical, false);
        printf("}, \"lens\": [");
    } else {
        for (int k = 0; k < 2; k++) {
            const rc_results *R = k ? &B : &A;
            printf("%s ", k ? "B" : "A");
            term_str(stdout, k ? pb : pa);
            /* the settings the header line shows (rc_settings), the first one's value alone */
            const char *sep = ": ";
            for (size_t i = 0; i < rc_n_settings; i++) {
                const rc_setting *s = &rc_settings[i];
                if (!s->table_label)
                    continue;
                const char *v = rc_setting_text(R, s);
                if (!v[0] || (s->table_hide && strcmp(v, s->table_hide) == 0))
                    continue;
                fputs(sep, stdout);
                if (sep[0] == ',')
                    printf("%s ", s->table_label);
                term_str(stdout, v);
                sep = ", ";
            }
            putchar('\n');
        }
        putchar('\n');
        printf("generation log-probs, A vs B: max |diff| %.3e, mean |diff| %.3e, bitwise equal %.4f (%lld tokens)\n\n",
               g.max_abs, g.mean_abs, g.identical, (long long)g.n);
        printf("%5s %11s %11s %10s %10s %9s %9s %9s %9s  %11s %11s %9s\n", "L", "mean A", "mean B", "std A", "std B",
               "clip A", "clip B", "ident A", "ident B", "fwd max|d|", "fwd mean|d|", "fwd ident");
    }
    int shown = 0;
    for (int i = 0; i < A.n_lens; i++)
        for (int j = 0; j < B.n_lens; j++) {
            if (A.lens[i].len != B.lens[j].len)
                continue;
            const rc_len_stats *sa = &A.lens[i].st, *sb = &B.lens[j].st;
            int64_t L = A.lens[i].len;
            tokdiff f = diff_tokens(&A, A.lens[i].logprob_fwd, B.lens[j].logprob_fwd, L, L);
            if (json) {
                printf("%s{\"len\": %lld, ", shown ? ", " : "", (long long)L);
                json_num(stdout, "a_mean", sa->mean, true);
                json_num(stdout, "b_mean", sb->mean, true);
                json_num(stdout, "a_std", sa->std, true);
                json_num(stdout, "b_std", sb->std, true);
                json_num(stdout, "a_clipfrac", sa->clipfrac, true);
                json_num(stdout, "b_clipfrac", sb->clipfrac, true);
                json_num(stdout, "a_k3", sa->k3, true);
                json_num(stdout, "b_k3", sb->k3, true);
                json_num(stdout, "a_identical_frac", sa->identical_frac, true);
                json_num(stdout, "b_identical_frac", sb->identical_frac, true);
                json_num(stdout, "forward_max_abs", f.max_abs, true);
                json_num(stdout, "forward_mean_abs", f.mean_abs, true);
                json_num(stdout, "forward_identical_frac", f.identical, false);
                printf("}");
            } else {
                printf("%5lld %11.6f %11.6f %10.3e %10.3e %9.5f %9.5f %9.4f %9.4f  %11.3e %11.3e %9.4f\n", (long long)L,
                       sa->mean, sb->mean, sa->std, sb->std, sa->clipfrac, sb->clipfrac, sa->identical_frac,
                       sb->identical_frac, f.max_abs, f.mean_abs, f.identical);
            }
            shown++;
        }
    if (json)
        printf("]}\n");
    else if (!shown)
        printf("(no length re-scored in both runs)\n");
    rc_results_free(&A);
    rc_results_free(&B);
    return 0;
}

static rc_status parse_dtype(const char *v, rc_dtype *dt)
{
    if (!strcmp(v, "fp32") || !strcmp(v, "float32"))
        *dt = RC_F32;
    else if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16"))
        *dt = RC_BF16;
    else if (!strcmp(v, "fp16") || !strcmp(v, "float16"))
        *dt = RC_F16;
    else
        return rc_errorf(RC_ERR_USAGE, "--dtype: '%s' is not one of fp32, fp16, bf16", v);
    return RC_OK;
}

static const char *dtype_str(rc_dtype dt) { return dt == RC_F32 ? "fp32" : dt == RC_BF16 ? "bf16" : "fp16"; }

static void note_stale(const char *tmp_path, long pid)
{
    fputs("ratiocheck: removed the stale temporary file ", stderr);
    term_str(stderr, tmp_path);
    fprintf(stderr, " (its process %ld is gone)\n", pid);
}

/* --out must not name an input, by any name (device and inode): a file of
 * the model folder (config.json, shards, tokenizer.json, ...), the prompts
 * or the replayed result file. */
static rc_status check_out_not_input(const char *out, const char *model_dir, const char *other)
{
    struct stat ob, ib;
    if (stat(out, &ob) != 0)
        return RC_OK; /* nothing there yet: it cannot be an input */
    if (other && stat(other, &ib) == 0 && ib.st_dev == ob.st_dev && ib.st_ino == ob.st_ino)
        return rc_errorf(RC_ERR_USAGE, "--out %s is an input of this run (%s); choose another output path", out,
                         other);
    DIR *d = opendir(model_dir);
    if (!d)
        return RC_OK; /* the model load names the problem */
    rc_status st = RC_OK;
    struct dirent *e;
    while (st == RC_OK && (e = readdir(d)) != NULL) {
        char *p = rc_path_join(model_dir, e->d_name);
        if (!p) {
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
            break;
        }
        if (stat(p, &ib) == 0 && S_ISREG(ib.st_mode) && ib.st_dev == ob.st_dev && ib.st_ino == ob.st_ino)
            st = rc_errorf(RC_ERR_USAGE, "--out %s is an input of this run (%s); choose another output path", out, p);
        free(p);
    }
    closedir(d);
    return st;
}

/* ---- the run command's options: one table ------------------------------- */

/* --kernels and a side's kernels= ("engine", "invariant", "blas"); opt names the option in errors */
static rc_status parse_kernels(const char *opt, const char *v, rc_kernels *k)
{
    if (!strcmp(v, "engine")) *k = RC_KERNELS_ENGINE;
    else if (!strcmp(v, "invariant")) *k = RC_KERNELS_INVARIANT;
    else if (!strcmp(v, "blas")) *k = RC_KERNELS_BLAS;
    else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not one of engine, invariant, blas", opt, v);
    return RC_OK;
}

/* --logprob-dtype and a side's logprob-dtype= ("fp32", "same": in the dtype) */
static rc_status parse_lpdt(const char *opt, const char *v, bool *same)
{
    if (!strcmp(v, "same")) *same = true;
    else if (!strcmp(v, "fp32")) *same = false;
    else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not fp32 or same", opt, v);
    return RC_OK;
}

/* One side of the check (--sampler / --trainer): what it computes with. */
typedef struct {
    rc_dtype dt;
    rc_kernels kernels;
    unsigned upcast; /* RC_UPCAST_* */
    bool lp_same;    /* log-softmax in the dtype */
    int64_t batch;   /* sampler: sequences decoded together; trainer: sequences per forward (0: all) */
    int64_t prefill_chunk; /* sampler: prompt tokens per prefill call; trainer: tokens per forward call
                            * through the cache (0: all in one call) */
    rc_precision mode;     /* pure dtype or autocast over fp32 masters */
    rc_kv_quant kv_quant;  /* sampler: the KV cache's storage (kv-cache=) */
    float kv_scale;        /* sampler, fp8 cache: k_scale = v_scale (kv-scale=, default 1 as vLLM) */
    int64_t tp;            /* tensor-parallel degree (1: none) */
    rc_tp_reduce tp_reduce; /* the all-reduce of its row-parallel layers (sampler: fp32, trainer: ring) */
    rc_wq_numerics wq;     /* sampler: fp8 weights of the linear layers (weights=fp8) */
    bool residual_f32;     /* residual=fp32: Megatron's --fp32-residual-connection */
} side;

/* Equal sides share one engine. With TP on either side they never do: the
 * sampler's bias goes into rank 0's partial, the trainer's after the reduce. */
static bool side_equal(const side *a, const side *b)
{
    return a->dt == b->dt && a->kernels == b->kernels && a->upcast == b->upcast && a->lp_same == b->lp_same &&
           a->mode == b->mode && a->residual_f32 == b->residual_f32 && a->kv_quant == b->kv_quant &&
           (a->kv_quant == RC_KV_AUTO || a->kv_scale == b->kv_scale) && a->tp <= 1 && b->tp <= 1 &&
           a->wq.kind == b->wq.kind &&
           (a->wq.kind == RC_WQ_NONE || (a->wq.scale == b->wq.scale && a->wq.act == b->wq.act));
}

static const char *kv_quant_str(rc_kv_quant q)
{
    return q == RC_KV_FP8_E4M3 ? "fp8_e4m3" : q == RC_KV_FP8_E5M2 ? "fp8_e5m2" : "auto";
}

/* the engine numerics of a side (trainer: Megatron's TP) */
static rc_numerics side_numerics(const side *sd, const rc_numerics *base, bool trainer)
{
    rc_numerics n = *base;
    n.dt = sd->dt;
    n.upcast = sd->upcast;
    n.logprob_dt = sd->lp_same ? sd->dt : RC_F32;
    n.mode = sd->mode;
    n.residual_f32 = sd->residual_f32;
    n.kv_quant = sd->kv_quant;
    n.kv_scale = sd->kv_scale;
    n.tp = (int)sd->tp;
    n.tp_reduce = sd->tp_reduce;
    n.tp_trainer = trainer;
    n.wq = sd->wq;
    return n;
}

/* "dtype=bf16,kernels=engine,upcast=softmax,logprob-dtype=fp32" (+ the batch) */
static const char *const k_wscale_names[] = {"tensor", "channel", "block"};  /* rc_wscale */
static const char *const k_act_names[] = {"dynamic-token", "dynamic-tensor", "none"}; /* rc_actquant */

static void side_str(const side *sd, bool trainer, char *buf, size_t n)
{
    char up[64];
    rc_upcast_str(sd->upcast, up, sizeof up);
    for (char *c = up; *c; c++)
        *c = *c == ',' ? '+' : *c;
    int k = snprintf(buf, n, "dtype=%s,kernels=%s,upcast=%s,logprob-dtype=%s", dtype_str(sd->dt),
                     rc_kernels_name(sd->kernels), up, sd->lp_same ? "same" : "fp32");
    if (sd->batch > 0 && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ",%s=%lld", trainer ? "micro-batch" : "batch", (long long)sd->batch);
    if (sd->prefill_chunk > 0 && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ",prefill-chunk=%lld", (long long)sd->prefill_chunk);
    if (sd->mode == RC_PREC_AUTOCAST && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ",mode=autocast");
    if (sd->residual_f32 && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ",residual=fp32");
    if (sd->kv_quant != RC_KV_AUTO && k > 0 && (size_t)k < n) /* auto: the string of a run without the key */
        k += snprintf(buf + k, n - (size_t)k, ",kv-cache=%s,kv-scale=%.9g", kv_quant_str(sd->kv_quant),
                 (double)sd->kv_scale);
    if (sd->tp > 1 && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ",tp=%lld,tp-reduce=%s", (long long)sd->tp, rc_tp_reduce_name(sd->tp_reduce));
    if (sd->wq.kind == RC_WQ_FP8 && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, ",weights=fp8,weight-scale=%s,act=%s", k_wscale_names[sd->wq.scale],
                 k_act_names[sd->wq.act]);
}

/* Apply SPEC (KEY=VALUE,...) of --sampler / --trainer (`opt`) to sd. The keys
 * of the sampler/trainer emulations still to come are refused by name. */
static rc_status parse_side(const char *opt, const char *spec, bool trainer, side *sd)
{
    if (!*spec)
        return rc_errorf(RC_ERR_USAGE, "%s: empty; expected KEY=VALUE[,...]", opt);
    char buf[512];
    if (strlen(spec) >= sizeof buf)
        return rc_errorf(RC_ERR_USAGE, "%s: longer than %zu bytes", opt, sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", spec);
    unsigned seen = 0;
    int lm_head = -1, weights_dt = -1; /* weights=bf16|fp16|fp32: must be the side's dtype */
    bool kv_scale_given = false;
    for (char *item = buf, *next; item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        char *eq = strchr(item, '=');
        if (!eq || eq == item || !eq[1])
            return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not KEY=VALUE", opt, item);
        *eq = '\0';
        const char *key = item, *v = eq + 1;
        static const char *const keys[] = {"dtype", "kernels", "upcast", "lm-head", "logprob-dtype", "batch",
                                           "micro-batch", "prefill-chunk", "mode", "kv-cache", "kv-scale", "tp",
                                           "tp-reduce", "weights", "weight-scale", "act", "residual", NULL};
        int ki = -1;
        for (int i = 0; keys[i]; i++)
            if (!strcmp(keys[i], key))
                ki = i;
        if (ki < 0) {
            return rc_errorf(RC_ERR_USAGE, "%s: unknown key '%s' (known: dtype, kernels, upcast, lm-head, "
                             "logprob-dtype, mode, residual, tp, tp-reduce, %s)", opt, key,
                             trainer ? "micro-batch, prefill-chunk"
                                     : "batch, prefill-chunk, kv-cache, kv-scale, weights, weight-scale, act");
        }
        if (seen & (1u << ki))
            return rc_errorf(RC_ERR_USAGE, "%s: %s is given twice", opt, key);
        seen |= 1u << ki;
        char what[600];
        snprintf(what, sizeof what, "%s %s", opt, key);
        switch (ki) {
        case 0:
            if (parse_dtype(v, &sd->dt) != RC_OK)
                return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not one of fp32, fp16, bf16", what, v);
            break;
        case 1:
            RC_TRY(parse_kernels(what, v, &sd->kernels));
            break;
        case 2: { /* ops joined with '+': "softmax+rope" */
            char list[128];
            if (strlen(v) >= sizeof list)
                return rc_errorf(RC_ERR_USAGE, "%s: too long", what);
            snprintf(list, sizeof list, "%s", v);
            for (char *c = list; *c; c++) /* no ',' gets here: the spec was split at them */
                *c = *c == '+' ? ',' : *c;
            unsigned up;
            if (rc_parse_upcast(list, &up) != RC_OK)
                return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not a list of softmax, rope, norm, lm_head joined with "
                                 "'+', or all, or none", what, v);
            sd->upcast = up; /* the whole set; lm-head= (in any order) decides the head */
            break;
        }
        case 3:
            if (!strcmp(v, "fp32")) lm_head = 1;
            else if (!strcmp(v, "dtype")) lm_head = 0;
            else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not fp32 or dtype", what, v);
            break;
        case 4:
            RC_TRY(parse_lpdt(what, v, &sd->lp_same));
            break;
        case 16: /* Megatron's --fp32-residual-connection */
            if (!strcmp(v, "fp32")) sd->residual_f32 = true;
            else if (!strcmp(v, "dtype")) sd->residual_f32 = false;
            else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not fp32 or dtype", what, v);
            break;
        case 8:
            if (!strcmp(v, "pure")) sd->mode = RC_PREC_PURE;
            else if (!strcmp(v, "autocast")) sd->mode = RC_PREC_AUTOCAST;
            else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not pure or autocast", what, v);
            break;
        case 13: { /* weights=dtype (or the dtype's name) | fp8 (fp8_e4m3) */
            rc_dtype wd;
            if (!strcmp(v, "fp8") || !strcmp(v, "fp8_e4m3")) {
                /* FSDP / Megatron trainers compute with the bf16 (or fp32) masters; fp8 weights are the
                 * rollout engine's. Transformer Engine's fp8 training recipes are another scheme. */
                if (trainer)
                    return rc_errorf(RC_ERR_UNSUPPORTED, "%s: weights=fp8 is the sampler's (an fp8 rollout "
                                     "engine); the trainer's fp8 training (Transformer Engine recipes) is not "
                                     "emulated", opt);
                sd->wq.kind = RC_WQ_FP8;
            } else if (!strcmp(v, "dtype")) {
                sd->wq.kind = RC_WQ_NONE;
            } else if (parse_dtype(v, &wd) == RC_OK) {
                sd->wq.kind = RC_WQ_NONE;
                weights_dt = (int)wd;
            } else {
                return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not dtype, bf16, fp16, fp32 or fp8", what, v);
            }
            break;
        }
        case 14:
        case 15: {
            const char *const *names = ki == 14 ? k_wscale_names : k_act_names;
            int found = -1;
            for (int i = 0; i < 3; i++)
                if (!strcmp(names[i], v))
                    found = i;
            if (found < 0)
                return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not one of %s, %s, %s", what, v, names[0], names[1],
                                 names[2]);
            if (trainer)
                return rc_errorf(RC_ERR_UNSUPPORTED, "%s: %s= belongs to weights=fp8, the sampler's", opt, key);
            if (ki == 14)
                sd->wq.scale = (rc_wscale)found;
            else
                sd->wq.act = (rc_actquant)found;
            break;
        }
        case 7: /* sampler: the prompts' prefill; trainer: the whole forward, through the cache */
            RC_TRY(parse_i64(what, v, 1, 1 << 24, &sd->prefill_chunk));
            break;
        case 9:
        case 10:
            /* a trainer (FSDP, Megatron) attends over the keys and values it
             * computed, in the model's dtype (even chunked, prefill-chunk=):
             * vLLM's fp8 KV cache is the sampler's */
            if (trainer)
                return rc_errorf(RC_ERR_UNSUPPORTED, "%s: %s= is the sampler's (a trainer keeps its keys and values in "
                                 "the model's dtype; --sampler kv-cache=fp8_e4m3)", opt, key);
            if (ki == 9) {
                if (!strcmp(v, "auto")) sd->kv_quant = RC_KV_AUTO;
                else if (!strcmp(v, "fp8_e4m3") || !strcmp(v, "fp8")) sd->kv_quant = RC_KV_FP8_E4M3;
                else if (!strcmp(v, "fp8_e5m2")) sd->kv_quant = RC_KV_FP8_E5M2;
                else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not auto, fp8_e4m3 (or fp8) or fp8_e5m2", what, v);
            } else {
                char *end;
                errno = 0;
                const double x = strtod(v, &end);
                if (*end || end == v || errno || !(x > 0.0) || !((float)x > 0.0f) || !((float)x < INFINITY))
                    return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not a positive finite number (an fp32 scale)",
                                     what, v);
                sd->kv_scale = (float)x;
                kv_scale_given = true;
            }
            break;
        case 11: /* whether the model's shapes allow it is checked with the model (rc_tp_check) */
            RC_TRY(parse_i64(what, v, 1, RC_TP_MAX, &sd->tp));
            break;
        case 12:
            if (rc_parse_tp_reduce(v, &sd->tp_reduce) != RC_OK)
                return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not one of fp32, ring, chain, seq", what, v);
            break;
        default: { /* batch (sampler) / micro-batch (trainer) */
            if ((ki == 5) == trainer)
                return rc_errorf(RC_ERR_USAGE, "%s: %s belongs to the %s", opt, key, trainer ? "sampler" : "trainer");
            RC_TRY(parse_i64(what, v, 1, 1 << 20, &sd->batch));
            break;
        }
        }
    }
    if (kv_scale_given && sd->kv_quant == RC_KV_AUTO)
        return rc_errorf(RC_ERR_USAGE, "%s: kv-scale= scales an fp8 KV cache: give kv-cache=fp8_e4m3 or fp8_e5m2",
                         opt);
    if (lm_head == 1)
        sd->upcast |= RC_UPCAST_LM_HEAD;
    else if (lm_head == 0)
        sd->upcast &= ~RC_UPCAST_LM_HEAD;
    if (weights_dt >= 0 && (rc_dtype)weights_dt != sd->dt)
        return rc_errorf(RC_ERR_USAGE, "%s: weights=%s but dtype=%s (the weights are held in the dtype unless "
                         "weights=fp8)", opt, dtype_str((rc_dtype)weights_dt), dtype_str(sd->dt));
    if ((seen & (3u << 14)) && sd->wq.kind != RC_WQ_FP8) /* weight-scale=, act= */
        return rc_errorf(RC_ERR_USAGE, "%s: weight-scale= and act= need weights=fp8", opt);
    return RC_OK;
}

/* The two sides into a rollout configuration: each side's numerics, the
 * sampler's batch and prefill chunks, the trainer's micro-batch. */
static void cfg_apply_sides(const side *sm, const side *tr, double temperature, rc_rollout_cfg *cfg)
{
    cfg->num.temperature = (float)temperature;
    cfg->num = side_numerics(sm, &cfg->num, false);
    cfg->trainer = !side_equal(sm, tr);
    cfg->num_trainer = side_numerics(tr, &cfg->num, true);
    cfg->batch = sm->batch;
    cfg->forward_batch = tr->batch;
    cfg->prefill_chunk = sm->prefill_chunk;
    cfg->forward_chunk = tr->prefill_chunk;
}

/* What the engine cannot take whatever the model: a side's mode=autocast
 * with fp32 or with upcasts other than the LM head (who: "--sampler" ...). */
static rc_status check_side(const char *who, const side *sd)
{
    /* the model-free checks of the engine's own (the model's at load) */
    const rc_numerics n = side_numerics(sd, &(rc_numerics){.temperature = 1.0f}, false);
    rc_status st = sd->wq.kind == RC_WQ_FP8 ? rc_fp8w_supported(NULL, &n) : RC_OK;
    if (st == RC_OK)
        st = rc_autocast_supported(NULL, &n);
    return st == RC_OK ? RC_OK : rc_error_prefix(st, "%s", who);
}

/* Everything the run's options set. */
typedef struct {
    char model_default[4096], prompts_default[4096];
    const char *model_dir, *prompts_path, *out_path, *replay, *backend;
    rc_rollout_cfg cfg;
    rc_kernels kernels;
    bool lp_same, force, json, quiet, help;
    bool len_given; /* --len was given (else --rollouts-from takes the file's lengths) */
    int64_t threads, num_prompts, seed, show, show_worst;
    unsigned by; /* --by: the strata tables to print (bit RC_STRATA_*) */
    double temperature;
    double clip_eps; /* --clip-eps: both sides, unless --clip-eps-low / -high (0: not given) */
    const char *sampler_spec, *trainer_spec; /* --sampler / --trainer, applied after the other options */
    side sampler, trainer;                   /* each side resolved from the options and its spec */
    gate gates[MAX_GATES];
    int n_gates;
    int64_t layers; /* --layers N (0: all) */
} run_opts;


static rc_status op_dtype(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    return parse_dtype(v, &ro->cfg.num.dt);
}

static rc_status op_kernels(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    return parse_kernels("--kernels", v, &ro->kernels);
}

static rc_status op_upcast(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    return rc_parse_upcast(v, &ro->cfg.num.upcast);
}

static rc_status op_alibi_bias(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    if (!strcmp(v, "model")) ro->cfg.num.alibi_rowmax = false;
    else if (!strcmp(v, "rowmax")) ro->cfg.num.alibi_rowmax = true;
    else return rc_errorf(RC_ERR_USAGE, "--alibi-bias: '%s' is not model or rowmax", v);
    return RC_OK;
}

static rc_status op_lpdt(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    return parse_lpdt("--logprob-dtype", v, &ro->lp_same);
}

static rc_status op_reference(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    if (!strcmp(v, "fp32")) ro->cfg.reference = 32;
    else if (!strcmp(v, "fp64")) ro->cfg.reference = 64;
    else if (!strcmp(v, "none")) ro->cfg.reference = 0;
    else return rc_errorf(RC_ERR_USAGE, "--reference: '%s' is not one of fp32, fp64, none", v);
    return RC_OK;
}

static rc_status op_backend(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto"))
        return rc_errorf(RC_ERR_USAGE, "--backend: '%s' is not one of cpu, cuda, auto", v);
    ro->backend = v;
    return RC_OK;
}

static rc_status op_len(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    ro->len_given = true;
    return parse_lens(v, &ro->cfg);
}

static rc_status op_gates(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    return parse_gates(v, ro->gates, &ro->n_gates);
}

#define RO(field) offsetof(run_opts, field)
static const opt_spec k_run_opts[] = {
    {"model", 0, "DIR", "Hugging Face model folder (default: the bundled model)", "Model and numerics:", op_path,
     RO(model_dir), 0, 0},
    {"layers", 0, "N", "run only the first N decoder layers, then the final\nnorm and the head (default all)", NULL,
     op_i64, RO(layers), 1, 4096},
    {"dtype", 0, "fp32|fp16|bf16", "dtype both paths compute in (default bf16)", NULL, op_dtype, 0, 0, 0},
    {"kernels", 0, "engine|invariant|blas", "reduction order (default engine)", NULL, op_kernels, 0, 0, 0},
    {"upcast", 0, "LIST", "ops kept in fp32: softmax,rope,norm,lm_head, or all (default none)", NULL, op_upcast, 0,
     0, 0},
    {"alibi-bias", 0, "model|rowmax",
     "ALiBi models: the bias as the family's code builds it\n(default model), or minus its row max: slope x (key -\n"
     "query) <= 0, the seed report's fix and what FlashAttention\nand vLLM compute (no effect on other models)",
     NULL, op_alibi_bias, 0, 0, 0},
    {"logprob-dtype", 0, "fp32|same", "log-softmax in fp32 (default) or in the model dtype", NULL, op_lpdt, 0, 0, 0},
    {"reference", 0, "fp32|fp64|none",
     "also re-score in fp32 (invariant kernels) or in\nfloat64, to report each path's own error (default none)", NULL,
     op_reference, 0, 0, 0},
    {"threads", 0, "N", "CPU threads (default: all cores)", NULL, op_i64, RO(threads), 1, 1024},
    {"backend", 0, "cpu|cuda|auto",
     "where to compute (default auto: cuda when this build\nhas it and a GPU answers, else cpu); cuda never falls\n"
     "back: without a usable GPU it exits 8 with the reason",
     NULL, op_backend, 0, 0, 0},
    {"prompts", 0, "FILE",
     ".txt (one prompt per line, \\n escapes), .jsonl\n({\"prompt\": ..}, {\"tokens\": [..]} or\n"
     "{\"messages\": [{\"role\": .., \"content\": ..}]}, rendered\nwith the model's chat template: ChatML or Llama-3)\n"
     "or .ids (token ids) (default: the bundled prompts)",
     "Rollouts:", op_path, RO(prompts_path), 0, 0},
    {"num-prompts", 0, "N", "use the first N prompts (default all)", NULL, op_i64, RO(num_prompts), 1, 1 << 24},
    {"samples", 0, "N", "samples per prompt (default 2)", NULL, op_i64, RO(cfg.samples), 1, 1 << 20},
    {"len", 0, "LIST", "generated lengths to re-score, e.g. 20,40,50, or ranges:\n64:4096:x2 (64, 128, ..., 4096), 10:50:+10 (default\n20,40,50; with --rollouts-from: the file's)", NULL, op_len, 0, 0, 0},
    {"batch", 0, "N", "sequences decoded together (default 32)", NULL, op_i64, RO(cfg.batch), 1, 1 << 20},
    {"forward-batch", 0, "N", "sequences per full forward (default: all)", NULL, op_i64, RO(cfg.forward_batch), 1,
     1 << 20},
    {"seed", 0, "N", "sampling seed (default 0)", NULL, op_i64, RO(seed), 0, 0x1p63},
    {"temperature", 0, "T", "sampling temperature (default 1.0)", NULL, op_f64, RO(temperature), 1e-3, 1e3},
    {"top-k", 0, "K", "top-k sampling, 0 = off (default 0)", NULL, op_i64, RO(cfg.sampling.top_k), 0, 1 << 24},
    {"top-p", 0, "P", "top-p sampling, 1.0 = off (default 1.0)", NULL, op_f64, RO(cfg.sampling.top_p), 1e-6, 1.0},
    {"stop-at-eos", 0, NULL, "stop a sequence at EOS (default: EOS ignored)", NULL, op_flag, RO(cfg.stop_at_eos), 0,
     0},
    {"rollouts-from", 0, "F.h5",
     "replay the prompts and generated tokens of an earlier run\ninstead of sampling (so `ratiocheck diff` can compare runs)",
     NULL, op_path, RO(replay), 0, 0},
    {"sampler", 0, "SPEC", "the sampler's side (cached generation): KEY=VALUE,... of\ndtype, kernels, upcast "
     "(ops joined with +), lm-head=fp32|dtype,\nlogprob-dtype, mode=pure|autocast (autocast: fp32 master\nweights under torch.autocast), residual=fp32|dtype\n(Megatron's --fp32-residual-connection), batch,\nprefill-chunk,\nkv-cache=auto|fp8_e4m3|fp8_e5m2 (vLLM's fp8 KV cache),\nkv-scale=S (its k/v scale, default 1), tp=N (tensor\nparallel), tp-reduce=fp32|ring|chain|seq (default fp32:\nvLLM's custom all-reduce), weights=dtype|fp8 (fp8 e4m3\nlinear layers, as an fp8 rollout engine) with\nweight-scale=tensor|channel|block and\nact=dynamic-token|dynamic-tensor|none (W8A16) (default:\nthe options above; fp8: tensor, dynamic-token)", "Two sides:",
     op_path, RO(sampler_spec), 0, 0},
    {"trainer", 0, "SPEC", "the trainer's side (full forward), the same keys with\nmicro-batch instead of batch (prefill-chunk: the forward\nin calls of N tokens through a KV cache; tp: Megatron's,\nbias after the reduce, default tp-reduce=ring: NCCL;\nkv-cache is the sampler's), e.g. "
     "dtype=bf16,lm-head=fp32", NULL, op_path, RO(trainer_spec), 0, 0},
    {"clip-eps", 0, "E", "PPO clip range [1 - E, 1 + E] of the clip fraction\n(default 0.2)", "Statistics:", op_f64,
     RO(clip_eps), 1e-9, 10.0},
    {"clip-eps-low", 0, "E", "its lower side alone, e.g. DAPO's 0.2 (default --clip-eps)", NULL, op_f64,
     RO(cfg.stat.clip_eps_low), 1e-9, 1.0},
    {"clip-eps-high", 0, "E", "its upper side alone, e.g. DAPO's 0.28 (default --clip-eps)", NULL, op_f64,
     RO(cfg.stat.clip_eps_high), 1e-9, 10.0},
    {"seq-eps", 0, "E", "GSPO band: a sequence is outside when its geometric-mean\nratio exp(mean log r) leaves "
     "[1 - E, 1 + E] (default 3e-4)", NULL, op_f64, RO(cfg.stat.seq_eps), 1e-12, 10.0},
    {"seq-cap", 0, "C", "sequence-level IS cap: a sequence is above it when\nexp(sum log r) > C (default 3)", NULL,
     op_f64, RO(cfg.stat.seq_cap), 1.0, 1e30},
    {"out", 0, "FILE.h5", "HDF5 results (default MODEL.DTYPE.ratiocheck.h5); --out none: no file", "Output:", op_path,
     RO(out_path), 0, 0},
    {"force", 0, NULL, "overwrite an existing output file", NULL, op_flag, RO(force), 0, 0},
    {"json", 0, NULL, "print one JSON object instead of the table", NULL, op_flag, RO(json), 0, 0},
    {"by", 0, "prob|entropy|prob,entropy",
     "also print log r by decile of the sampler's token\nprobability and/or entropy at the longest length\n(JSON and "
     "HDF5 always have them, for every length)",
     NULL, op_by, RO(by), 0, 0},
    {"fail-above", 0, "M=V,...",
     "exit 3 if a metric exceeds its limit at any length\n(clipfrac, k3, abs_k1, std, max_abs_dev, mult_prob_err,\n"
     " nonidentical_frac, frac_gt_0.001, frac_gt_0.01, frac_gt_0.1)",
     NULL, op_gates, 0, 0, 0},
    {"show", 0, "N", "print the first N completions with their per-token ratios\n(with --json: \"completions\")",
     NULL, op_i64, RO(show), 0, 1 << 20},
    {"show-worst", 0, "N", "the same for the N sequences with the largest |S|\n(sum of log r at the longest length)",
     NULL, op_i64, RO(show_worst), 0, 1 << 20},
    {"quiet", 'q', NULL, "no progress bar", NULL, op_flag, RO(quiet), 0, 0},
    {"help", 'h', NULL, "show this help", NULL, op_flag, RO(help), 0, 0},
};
#undef RO
#define N_RUN_OPTS (sizeof k_run_opts / sizeof k_run_opts[0])


/* Parse the run command's options into ro (defaults first). Returns an exit
 * code when the command is done (--help, a usage error), else -1. */
static int parse_run_args(int argc, char **argv, run_opts *ro)
{
    memset(ro, 0, sizeof *ro);
    snprintf(ro->model_default, sizeof ro->model_default, "%s/models/pythia-rc-tiny", data_dir());
    snprintf(ro->prompts_default, sizeof ro->prompts_default, "%s/prompts/default.txt", data_dir());
    ro->model_dir = ro->model_default;
    ro->prompts_path = ro->prompts_default;
    ro->backend = "auto";
    ro->cfg = (rc_rollout_cfg){.samples = 2, .batch = 32, .forward_batch = 0, .seed = 0,
                               .sampling = {.top_k = 0, .top_p = 1.0}, .num = rc_numerics_fp32()};
    ro->cfg.num.dt = RC_BF16;
    parse_lens("20,40,50", &ro->cfg);
    ro->kernels = RC_KERNELS_ENGINE;
    ro->temperature = 1.0;

    int code = parse_opts(argc, argv, k_run_opts, N_RUN_OPTS, ro, offsetof(run_opts, help),
                          "Usage: ratiocheck [run] [OPTIONS]\n"
                          "\n"
                          "Samples rollouts with KV-cached decoding, re-scores them with one batched\n"
                          "full forward pass per length, and reports the PPO ratio exp(new - old).\n"
                          "\n");
    if (code >= 0)
        return code;
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (ro->show > 0 && ro->show_worst > 0)
        return usage_error("--show and --show-worst cannot be combined (the first N or the worst N)");
    /* the two sides: the options above, then each side's spec */
    const side base = {ro->cfg.num.dt, ro->kernels, ro->cfg.num.upcast, ro->lp_same, 0, 0, RC_PREC_PURE, RC_KV_AUTO,
                       1.0f, 1, RC_TP_REDUCE_FP32, {0}, false};
    ro->sampler = ro->trainer = base;
    ro->trainer.tp_reduce = RC_TP_REDUCE_RING; /* Megatron's all-reduce is NCCL's (vLLM's custom one: fp32) */
    ro->sampler.batch = ro->cfg.batch;
    ro->trainer.batch = ro->cfg.forward_batch;
    rc_status sst = RC_OK;
    if (ro->sampler_spec)
        sst = parse_side("--sampler", ro->sampler_spec, false, &ro->sampler);
    if (sst == RC_OK && ro->trainer_spec)
        sst = parse_side("--trainer", ro->trainer_spec, true, &ro->trainer);
    if (sst == RC_OK)
        sst = check_side("--sampler", &ro->sampler);
    if (sst == RC_OK)
        sst = check_side("--trainer", &ro->trainer);
    if (sst != RC_OK)
        return fail(sst);
    ro->cfg.batch = ro->sampler.batch;
    ro->cfg.forward_batch = ro->trainer.batch;
    ro->cfg.prefill_chunk = ro->sampler.prefill_chunk;
    ro->cfg.forward_chunk = ro->trainer.prefill_chunk;
    rc_stat_params *sp = &ro->cfg.stat;
    if (sp->clip_eps_low <= 0)
        sp->clip_eps_low = ro->clip_eps > 0 ? ro->clip_eps : RC_DEFAULT_CLIP_EPS;
    if (sp->clip_eps_high <= 0)
        sp->clip_eps_high = ro->clip_eps > 0 ? ro->clip_eps : RC_DEFAULT_CLIP_EPS;
    if (sp->clip_eps_low >= 1.0)
        return usage_error("--clip-eps%s %g: the lower clip bound 1 - E must stay above 0",
                           ro->clip_eps == sp->clip_eps_low ? "" : "-low", sp->clip_eps_low);
    rc_stat_params_fill_defaults(sp);
    return -1;
}

/* One run: what each step makes, freed in one place (run_free). */
typedef struct {
    run_opts ro;
    rc_rollout_cfg cfg;        /* what rc_run_check runs */
    const char *prompts_path;  /* or the --rollouts-from file */
    const char *out_path;      /* NULL: --out none */
    char out_default[4096];
    bool use_cuda;
    char device[128];          /* as rc_results.device */
    int n_threads;
    rc_model *m;
    rc_tokenizer *tok;
    rc_prompts prompts;
    rc_results prev;           /* --rollouts-from */
    rc_backend *be, *ref_be, *trainer_be; /* trainer_be: only when the trainer's kernels differ */
    rc_results res;
    const char *out_kind;      /* the default output's middle name: "ratiocheck" or "sweep" */
} run_ctx;

/* Before any work: the backend (cuda: that or the reason, never a silent
 * fallback; auto: cuda when this build has it and a device answers), and
 * the output path, decided and checked. */
static rc_status run_prepare(run_ctx *x)
{
    const run_opts *ro = &x->ro;
    const char *fault = getenv("RATIOCHECK_FAULT"); /* tests: README's exit code 1 */
    if (fault && !strcmp(fault, "internal"))
        return rc_errorf(RC_ERR_INTERNAL, "fault injected by RATIOCHECK_FAULT=internal");
    const bool want_cuda = !strcmp(ro->backend, "cuda");
    if (want_cuda || (!strcmp(ro->backend, "auto") && rc_cuda_compiled() && ro->sampler.kernels != RC_KERNELS_BLAS &&
                      ro->trainer.kernels != RC_KERNELS_BLAS)) {
        int nd;
        rc_status st = rc_cuda_probe(&nd, x->device, sizeof x->device);
        x->use_cuda = st == RC_OK;
        if (want_cuda && st != RC_OK) /* the reason, before any work */
            return st;
        rc_clear_error();
    }
    x->cfg = ro->cfg;
    x->cfg.seed = (uint64_t)ro->seed;
    cfg_apply_sides(&ro->sampler, &ro->trainer, ro->temperature, &x->cfg);
    x->prompts_path = ro->prompts_path;
    x->out_path = ro->out_path;
    const char *model_dir = ro->model_dir;
    if (!x->out_path) { /* MODEL.DTYPE.ratiocheck.h5, MODEL the folder's last name */
        const char *base = strrchr(model_dir, '/');
        size_t ml = strlen(model_dir);
        while (base && base[1] == '\0' && base > model_dir) { /* trailing slash */
            ml = (size_t)(base - model_dir);
            base = NULL;
            for (size_t i = ml; i > 0; i--)
                if (model_dir[i - 1] == '/') {
                    base = model_dir + i - 1;
                    break;
                }
        }
        const char *name = base ? base + 1 : model_dir;
        size_t nl = strlen(name);
        if (nl > ml - (size_t)(name - model_dir))
            nl = ml - (size_t)(name - model_dir);
        snprintf(x->out_default, sizeof x->out_default, "%.*s.%s.%s.h5", (int)nl, name, dtype_str(x->cfg.num.dt),
                 x->out_kind ? x->out_kind : "ratiocheck");
        x->out_path = x->out_default;
    }
    if (!strcmp(x->out_path, "none"))
        x->out_path = NULL;
    if (x->out_path) {
        rc_h5_remove_stale_temps(x->out_path, note_stale);
        RC_TRY(rc_h5_check_output(x->out_path, ro->force));
        RC_TRY(check_out_not_input(x->out_path, model_dir, ro->replay ? ro->replay : ro->prompts_path));
    }
    return RC_OK;
}

/* The model, its tokenizer, and the prompts (or an earlier run's rollouts),
 * every prompt checked against the model's context and vocabulary. */
static rc_status run_load(run_ctx *x)
{
    const run_opts *ro = &x->ro;
    rc_status st = rc_model_load_layers(ro->model_dir, ro->layers, false, &x->m); /* first: text prompts need its tokenizer */
    if (st != RC_OK)
        return st;
    const rc_config *mc = &x->m->cfg;
    char eos_w[512];
    if (rc_config_eos_warning(mc, eos_w, sizeof eos_w))
        fprintf(stderr, "ratiocheck: warning: %s: %s\n", ro->model_dir, eos_w);
    char *tp = rc_path_join(ro->model_dir, "tokenizer.json");
    bool have_tok = false;
    st = tp ? optional_file(tp, &have_tok) : rc_errorf(RC_ERR_NOMEM, "out of memory");
    if (st == RC_OK && have_tok)
        st = rc_tokenizer_load(tp, mc->vocab, &x->tok);
    free(tp);
    if (st != RC_OK)
        return st;
    rc_rollout_cfg *cfg = &x->cfg;
    rc_prompts *pr = &x->prompts;
    if (!ro->replay) {
        /* each prompt is checked against the context as it is read, before any padding */
        const rc_prompt_limits lim = {ro->num_prompts, mc->max_pos, cfg->lens[cfg->n_lens - 1]};
        RC_TRY(rc_prompts_load(ro->prompts_path, x->tok, &lim, pr));
    } else { /* --rollouts-from: the prompts and generated tokens of an earlier run */
        rc_results *prev = &x->prev;
        RC_TRY(rc_h5_read(ro->replay, prev));
        /* every id, length and count, against this model, before anything indexes with them */
        RC_TRY(rc_results_check_replay(prev, ro->replay, mc->vocab, mc->max_pos));
        pr->n = prev->n_prompts;
        pr->max_len = prev->prompt_max;
        pr->tokens = prev->prompt_tokens;
        pr->len = prev->prompt_len;
        pr->text = prev->prompt_text;
        prev->prompt_tokens = NULL; /* ownership moves to prompts */
        prev->prompt_len = NULL;
        prev->prompt_text = NULL;
        pr->line = calloc((size_t)prev->n_prompts + 1, sizeof *pr->line);
        if (!pr->line)
            return rc_errorf(RC_ERR_NOMEM, "out of memory");
        for (int64_t p = 0; p < pr->n; p++)
            pr->line[p] = p + 1;
        cfg->samples = prev->samples;
        if (!ro->len_given) { /* the file's lengths (checked ascending and within gen_len by the reader) */
            if (prev->n_lens < 1 || prev->n_lens > RC_MAX_LENS)
                return rc_errorf(RC_ERR_FORMAT, "%s: %d lengths (1 to %d expected)", ro->replay, prev->n_lens,
                                 RC_MAX_LENS);
            cfg->n_lens = prev->n_lens;
            for (int i = 0; i < prev->n_lens; i++)
                cfg->lens[i] = prev->lens[i].len;
        }
        cfg->forced_tokens = prev->gen_tokens;
        cfg->forced_valid = prev->gen_valid;
        cfg->forced_len = prev->gen_len;
        x->prompts_path = ro->replay;
        if (ro->num_prompts > 0 && ro->num_prompts < pr->n)
            return rc_errorf(RC_ERR_USAGE, "--num-prompts cannot be combined with --rollouts-from");
    }
    /* every prompt must fit the context with the longest --len (the prompt
     * loader checked its own and read only the first --num-prompts; this is
     * for replayed prompts) */
    for (int64_t p = 0; p < pr->n; p++)
        if (pr->len[p] + cfg->lens[cfg->n_lens - 1] > mc->max_pos)
            return rc_errorf(RC_ERR_USAGE,
                             "%s:%lld: prompt of %d tokens plus %lld generated tokens exceeds the model's %lld positions",
                             x->prompts_path, (long long)pr->line[p], pr->len[p],
                             (long long)cfg->lens[cfg->n_lens - 1], (long long)mc->max_pos);
    for (int64_t p = 0; p < pr->n; p++)
        for (int64_t t = 0; t < pr->len[p]; t++)
            if (pr->tokens[p * pr->max_len + t] >= mc->vocab)
                return rc_errorf(RC_ERR_FORMAT, "%s: prompt %lld: token id %d is outside the vocabulary of %s (%lld)",
                                 x->prompts_path, (long long)p + 1, pr->tokens[p * pr->max_len + t], ro->model_dir,
                                 (long long)mc->vocab);
    cfg->n_prompts = pr->n;
    cfg->prompt_max = pr->max_len;
    cfg->prompt_tokens = pr->tokens;
    cfg->prompt_len = pr->len;
    return RC_OK;
}

/* The backends, then sampling and re-scoring (the only step that polls the
 * interrupt flag; signals elsewhere end the process at once). */
/* a backend with these kernels where the run computes (x->use_cuda) */
static rc_status backend_for(const run_ctx *x, rc_kernels k, rc_backend **out)
{
    return x->use_cuda ? rc_backend_cuda_create(k, out) : rc_backend_cpu_create(x->n_threads, k, out);
}

/* The two sides' backends: the sampler's, and the trainer's when its kernels differ (else NULL). */
static rc_status side_backends(const run_ctx *x, const side *sm, const side *tr, rc_backend **be, rc_backend **tbe)
{
    *be = *tbe = NULL;
    rc_status st = backend_for(x, sm->kernels, be);
    if (st == RC_OK && tr->kernels != sm->kernels)
        st = backend_for(x, tr->kernels, tbe);
    return st;
}

/* rc_run_check with the progress bar, polling the interrupt flag (the only
 * work that does; signals elsewhere end the process at once) */
static rc_status run_check_polled(const run_ctx *x, rc_backend *be, rc_backend *ref_be, const rc_rollout_cfg *cfg,
                                  rc_results *out)
{
    progress_state ps = {.enabled = !x->ro.quiet && isatty(STDERR_FILENO) &&
                                    !(getenv("TERM") && !strcmp(getenv("TERM"), "dumb"))};
    g_polling = 1;
    rc_status st = g_interrupted_flag ? rc_errorf(RC_ERR_INTERRUPTED, "interrupted")
                                      : rc_run_check(x->m, be, ref_be, cfg, progress_cb, &ps, &g_interrupted_flag, out);
    g_polling = 0;
    if (st == RC_OK && g_interrupted_flag) /* arrived after the last check */
        st = rc_errorf(RC_ERR_INTERRUPTED, "interrupted");
    if (ps.enabled)
        fprintf(stderr, "\r\033[K");
    return st;
}

static rc_status run_compute(run_ctx *x)
{
    const run_opts *ro = &x->ro;
    x->n_threads = ro->threads > 0 ? (int)ro->threads : omp_get_num_procs();
    if (x->use_cuda)
        omp_set_num_threads(x->n_threads); /* host work: sampling, the fp64 reference */
    rc_status st = side_backends(x, &ro->sampler, &ro->trainer, &x->be, &x->trainer_be);
    x->cfg.trainer_be = x->trainer_be;
    if (st == RC_OK && x->cfg.reference == 32) /* the reference runs where the check runs */
        st = backend_for(x, RC_KERNELS_INVARIANT, &x->ref_be);
    return st == RC_OK ? run_check_polled(x, x->be, x->ref_be, &x->cfg, &x->res) : st;
}

/* The run's settings, prompt texts and completions into the results, and
 * the results into the HDF5 file. */
/* every generated sequence of res decoded with tok (res->completion) */
static rc_status decode_completions(const rc_tokenizer *tok, rc_results *res)
{
    res->completion = calloc((size_t)res->n_seq + 1, sizeof *res->completion);
    if (!res->completion)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    for (int64_t q = 0; q < res->n_seq; q++)
        RC_TRY(rc_tokenizer_decode(tok, res->gen_tokens + q * res->gen_len, res->gen_valid[q], false,
                                   &res->completion[q], NULL));
    return RC_OK;
}

/* The run's settings and prompt texts into x->res (no completions, no file). */
static rc_status run_settings(run_ctx *x, const char *cmdline)
{
    const run_opts *ro = &x->ro;
    const rc_rollout_cfg *cfg = &x->cfg;
    rc_results *res = &x->res;
    snprintf(res->version, sizeof res->version, "%s", RC_VERSION);
    res->command_line = strdup(cmdline);
    res->model_path = strdup(ro->model_dir);
    if (!res->command_line || !res->model_path)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    snprintf(res->model_type, sizeof res->model_type, "%s", x->m->cfg.model_type);
    if (x->m->cfg.n_layers < x->m->cfg.n_layers_model) /* --layers N */
        snprintf(res->layers, sizeof res->layers, "%lld of %lld", (long long)x->m->cfg.n_layers,
                 (long long)x->m->cfg.n_layers_model);
    else
        snprintf(res->layers, sizeof res->layers, "all");
    snprintf(res->dtype, sizeof res->dtype, "%s", dtype_str(cfg->num.dt));
    snprintf(res->kernels, sizeof res->kernels, "%s", rc_kernels_name(ro->sampler.kernels));
    if ((ro->sampler_spec || ro->trainer_spec) && !res->trainer[0]) { /* both sides, when a spec was given */
        side_str(&ro->sampler, false, res->sampler, sizeof res->sampler);
        side_str(&ro->trainer, true, res->trainer, sizeof res->trainer);
    }
    rc_upcast_str(cfg->num.upcast, res->upcast, sizeof res->upcast);
    snprintf(res->alibi_bias, sizeof res->alibi_bias, "%s", cfg->num.alibi_rowmax ? "rowmax" : "model");
    snprintf(res->logprob_dtype, sizeof res->logprob_dtype, "%s", ro->sampler.lp_same ? dtype_str(cfg->num.dt) : "fp32");
    snprintf(res->reference, sizeof res->reference, "%s",
             cfg->reference == 32 ? "fp32" : cfg->reference == 64 ? "fp64" : "none");
    snprintf(res->backend, sizeof res->backend, "%s", x->be->ops->name);
    snprintf(res->device, sizeof res->device, "%s", x->use_cuda ? x->device : "");
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(res->created, sizeof res->created, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    res->threads = x->n_threads;
    res->seed = ro->seed;
    res->top_k = cfg->sampling.top_k;
    res->top_p = cfg->sampling.top_p;
    res->temperature = ro->temperature;
    res->samples = cfg->samples;
    res->batch = cfg->batch;
    res->forward_batch = cfg->forward_batch;
    res->stop_at_eos = cfg->stop_at_eos;
    if (x->prompts.text) {
        res->prompt_text = calloc((size_t)res->n_prompts, sizeof *res->prompt_text);
        if (!res->prompt_text)
            return rc_errorf(RC_ERR_NOMEM, "out of memory");
        for (int64_t p = 0; p < res->n_prompts; p++)
            if (x->prompts.text[p] && !(res->prompt_text[p] = strdup(x->prompts.text[p])))
                return rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    return RC_OK;
}

/* The settings, the completions (with a tokenizer) and the output file. */
static rc_status run_record(run_ctx *x, const char *cmdline)
{
    RC_TRY(run_settings(x, cmdline));
    if (x->tok)
        RC_TRY(decode_completions(x->tok, &x->res));
    return x->out_path ? rc_h5_write(&x->res, x->out_path, x->ro.force) : RC_OK;
}

/* The table or JSON, the completions, the gates: the exit code. */
static int run_report(const run_ctx *x)
{
    const run_opts *ro = &x->ro;
    const rc_results *res = &x->res;
    int code = 0;
    for (int i = 0; i < res->n_lens; i++)
        for (int g = 0; g < ro->n_gates; g++) {
            double v = gate_value(&res->lens[i].st, ro->gates[g].metric);
            if (!(v <= ro->gates[g].limit)) { /* NaN fails too */
                fprintf(stderr, "ratiocheck: %s = %.6g exceeds %.6g at L=%lld\n", ro->gates[g].metric, v,
                        ro->gates[g].limit, (long long)res->lens[i].len);
                code = rc_exit_code(RC_ERR_GATE);
            }
        }
    const int gates = ro->n_gates == 0 ? -1 : code != 0;
    show_sel sel = {x->tok, NULL, 0};
    int64_t *idx = NULL;
    if (ro->show > 0 || ro->show_worst > 0) {
        idx = show_pick(res, ro->show, ro->show_worst, &sel.n);
        if (!idx)
            return fail(rc_errorf(RC_ERR_NOMEM, "out of memory"));
        sel.idx = idx;
    }
    if (ro->json) {
        print_json(res, x->out_path, gates, &sel);
    } else {
        print_table(res, x->out_path, gates, ro->by);
        if (idx)
            print_show(res, x->tok, idx, sel.n, ro->show_worst > 0);
    }
    free(idx);
    return code;
}

static void run_free(run_ctx *x)
{
    rc_results_free(&x->res);
    rc_results_free(&x->prev);
    rc_tokenizer_free(x->tok);
    rc_backend_destroy(x->be);
    rc_backend_destroy(x->ref_be);
    rc_backend_destroy(x->trainer_be);
    rc_model_free(x->m);
    rc_prompts_free(&x->prompts);
}

/* A run whose every engine computes in one 2-byte dtype (both sides, no
 * fp32 / fp64 reference): the model's load-time copies (fused QKV and other
 * layout fixes) rounded to it once and held at its width, the values the
 * engines would round them to (rc_model_narrow). Sweep, score and trace
 * replay other settings and keep the stored values. */
static rc_status run_narrow_model(run_ctx *x)
{
    const rc_rollout_cfg *c = &x->cfg;
    if (c->reference != 0 || c->num.dt != c->num_trainer.dt)
        return RC_OK;
    return rc_model_narrow(x->m, c->num.dt);
}

/* parse -> prepare -> load -> compute -> record -> report, one cleanup */
static int cmd_run(int argc, char **argv, const char *cmdline)
{
    static run_ctx x; /* large (paths, options); one run per process */
    memset(&x, 0, sizeof x);
    int code = parse_run_args(argc, argv, &x.ro);
    if (code >= 0)
        return code;
    rc_status st = run_prepare(&x);
    if (st == RC_OK)
        st = run_load(&x);
    if (st == RC_OK)
        st = run_narrow_model(&x);
    if (st == RC_OK)
        st = run_compute(&x);
    if (st == RC_OK)
        st = run_record(&x, cmdline);
    code = st == RC_OK ? run_report(&x) : fail(st);
    run_free(&x);
    return code;
}


/* ------------------------------------------------------------------------ */
/* ratiocheck score                                                          */

#define MAX_SWEEP 64
/* One setting of a sweep: SPEC applied to the sampler, the trainer or both
 * (sides bit 1 / 2), over the base's sides. */
typedef struct {
    char name[96];
    unsigned sides;
    char spec[160];
} sweep_setting;
static rc_status parse_vary(const char *v, sweep_setting *out);
static int default_settings(const run_ctx *x, sweep_setting *t);
static rc_status sweep_run(run_ctx *x, const sweep_setting *set, int n_set);
static rc_status sweep_sides(const run_opts *ro, const sweep_setting *set, side *sm, side *tr);

static const char k_score_usage[] =
    "Usage: ratiocheck score --rollouts FILE [--format F] [RUN OPTIONS]\n"
    "\n"
    "Re-scores rollouts your own engine logged: its log-probs are the sampler's\n"
    "side (\"old\"), ratiocheck computes the trainer's full forward (--trainer,\n"
    "--dtype ...) and the reference, and reports the same statistics, verdict,\n"
    "HDF5 file and gates as a run (README \"Check your own engine\").\n"
    "\n"
    "  --rollouts FILE        the logged rollouts\n"
    "  --format F             auto (default: sniffed), jsonl, vllm, sglang, h5\n"
    "  --logprobs-kind K      raw (default: the full distribution at temperature 1,\n"
    "                         vLLM raw_logprobs) or processed (after temperature and\n"
    "                         top-k / top-p); a file's \"logprobs_kind\" wins\n"
    "  --check-only           read and check the file against the model (ids, counts,\n"
    "                         positions, log-prob values), print what it holds, and\n"
    "                         stop before the forward pass (no output file)\n"
    "  --sweep                also replay the trainer with one setting changed at a\n"
    "                         time (the trainer-side defaults of ratiocheck sweep)\n"
    "  --vary trainer:SPEC    a setting of that sweep (repeatable; replaces the defaults)\n"
    "  --chunk-rollouts N     score a large file in chunks of at most N rollouts\n"
    "                         (default 4096, fewer when they would pad to more than\n"
    "                         4M cells; a multiple of --forward-batch when larger):\n"
    "                         memory stays bounded, the statistics are the same (the\n"
    "                         quantiles and strata exact up to 4M tokens, README);\n"
    "                         a file of more than one chunk takes no --show,\n"
    "                         --show-worst; --sweep scores every rollout at once\n"
    "  --temperature T, --top-k K, --top-p P   the sampler's settings when the file\n"
    "                         does not state them (a file that states others: exit 2)\n"
    "\n"
    "The run options that apply: --model --dtype --kernels --upcast --alibi-bias\n"
    "--logprob-dtype --reference --threads --backend --len (default: the longest\n"
    "response) --forward-batch (default 64) --trainer --clip-eps --clip-eps-low\n"
    "--clip-eps-high --seq-eps --seq-cap --out (default MODEL.DTYPE.score.h5) --force\n"
    "--json --fail-above --show --show-worst -q (ratiocheck run --help).\n";

typedef struct {
    const char *rollouts, *format, *kind, *chunk;
    bool check_only, sweep;
    const char *vary[MAX_SWEEP];
    int n_vary;
    bool temperature, top_k, top_p, forward_batch; /* given on the command line */
} score_args;

/* Take score's own options out of argv (into sa), refuse the run options that
 * do not apply, and leave the rest in av for parse_run_args. Returns an exit
 * code when done (--help, a usage error), else -1. */
static int score_split_args(int argc, char **argv, score_args *sa, char **av, int *ac)
{
    static const char *const own[] = {"rollouts", "format", "logprobs-kind", "chunk-rollouts"};
    static const char *const refused[] = {"prompts", "num-prompts", "samples", "rollouts-from", "seed", "sampler",
                                          "batch", "stop-at-eos"};
    *ac = 0;
    av[(*ac)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return (fputs(k_score_usage, stdout), 0);
        if (strncmp(a, "--", 2) != 0 || !a[2]) {
            av[(*ac)++] = argv[i];
            continue;
        }
        if (!strcmp(a, "--check-only") || !strcmp(a, "--sweep")) {
            if (a[2] == 'c')
                sa->check_only = true;
            else
                sa->sweep = true;
            continue;
        }
        if (!strcmp(a, "--vary") || !strncmp(a, "--vary=", 7)) {
            const char *v = a[6] == '=' ? a + 7 : i + 1 < argc ? argv[++i] : NULL;
            if (!v)
                return usage_error("score: --vary needs trainer:SPEC");
            if (strncmp(v, "trainer:", 8) != 0)
                return usage_error("score: --vary '%s': only the trainer varies (trainer:SPEC); the sampler is the "
                                   "logged file", v);
            if (sa->n_vary >= MAX_SWEEP)
                return usage_error("score: at most %d --vary settings", MAX_SWEEP);
            sa->vary[sa->n_vary++] = v;
            sa->sweep = true;
            continue;
        }
        const char *eq = strchr(a + 2, '=');
        const size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        int k = -1;
        for (int j = 0; j < 4; j++)
            if (strlen(own[j]) == nl && !strncmp(a + 2, own[j], nl))
                k = j;
        for (int j = 0; j < 8; j++)
            if (strlen(refused[j]) == nl && !strncmp(a + 2, refused[j], nl))
                return usage_error("score: --%s does not apply: the rollouts come from --rollouts FILE", refused[j]);
        if (k < 0) {
            sa->temperature |= nl == 11 && !strncmp(a + 2, "temperature", nl);
            sa->top_k |= nl == 5 && !strncmp(a + 2, "top-k", nl);
            sa->top_p |= nl == 5 && !strncmp(a + 2, "top-p", nl);
            sa->forward_batch |= nl == 13 && !strncmp(a + 2, "forward-batch", nl);
            av[(*ac)++] = argv[i];
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v)
            return usage_error("option --%s needs a value", own[k]);
        if (k == 0)
            sa->rollouts = v;
        else if (k == 1)
            sa->format = v;
        else if (k == 2)
            sa->kind = v;
        else
            sa->chunk = v;
    }
    av[*ac] = NULL;
    if (!sa->rollouts)
        return usage_error("score needs --rollouts FILE (ratiocheck score --help)");
    if (!sa->rollouts[0])
        return usage_error("--rollouts: the path is empty");
    if (sa->kind && strcmp(sa->kind, "raw") && strcmp(sa->kind, "processed"))
        return usage_error("--logprobs-kind: '%s' is not raw or processed", sa->kind);
    return -1;
}

/* reading a large rollout file: a line on a terminal */
static void score_read_progress(void *ctx, int64_t done, int64_t total, int64_t rollouts)
{
    const char *path = ctx;
    fprintf(stderr, "\r\033[Kreading %s: %3.0f%%, %lld rollouts", path,
            total > 0 ? 100.0 * (double)done / (double)total : 0.0, (long long)rollouts);
}

/* How score goes through the file: every rollout at once (one chunk: the
 * tables and results of a run), or chunk by chunk (rows rollouts each,
 * padded to the file's longest prompt P and response G). */
typedef struct {
    rc_rollout_format fmt;
    bool chunked;
    int64_t rows, P, G;
} score_plan;

/* The file's first pass: every record read and checked in chunks (never
 * all of them held), the counts, the longest prompt and response and the
 * settings into *set (no arrays), the response texts of the first rollouts
 * against the tokenizer. A problem with the texts is raised after the whole
 * file was read, as when the file was read whole first. */
static rc_status score_scan(run_ctx *x, const score_args *sa, rc_rollout_format fmt, rc_rollout_set *set,
                            rc_score_align *text_notes)
{
    const rc_config *mc = &x->m->cfg;
    const run_opts *ro = &x->ro;
    const bool bar = !ro->quiet && isatty(STDERR_FILENO) && !(getenv("TERM") && !strcmp(getenv("TERM"), "dumb"));
    rc_rollout_reader *R = NULL;
    RC_TRY(rc_rollouts_open(sa->rollouts, fmt, mc->vocab, mc->max_pos, bar ? score_read_progress : NULL,
                            (void *)sa->rollouts, &R));
    const rc_rollout_set *c = NULL;
    rc_status st = rc_rollouts_next(R, RC_ROLLOUT_TEXT_KEPT, 0, &c), text_st = RC_OK;
    char text_err[1400] = "";
    if (st == RC_OK) {
        int64_t compared, differ;
        text_st = rc_score_check_text(c, sa->rollouts, x->tok, text_notes, &compared, &differ);
        if (text_st != RC_OK) {
            snprintf(text_err, sizeof text_err, "%s", rc_last_error());
            rc_clear_error();
        }
    }
    int64_t n = 0, pmax = 0, rmax = 0, toks = 0, resp = 0;
    while (st == RC_OK && c->n > 0) {
        n += c->n;
        pmax = c->prompt_max > pmax ? c->prompt_max : pmax;
        rmax = c->resp_max > rmax ? c->resp_max : rmax;
        toks += c->tok_off[c->n];
        resp += c->lp_off[c->n];
        st = rc_rollouts_next(R, (int64_t)1 << 16, (int64_t)1 << 22, &c);
    }
    if (bar)
        fprintf(stderr, "\r\033[K");
    if (st == RC_OK) { /* the settings of the whole file; no arrays */
        memset(set, 0, sizeof *set);
        set->n = n;
        set->prompt_max = pmax;
        set->resp_max = rmax;
        set->n_tokens = toks;
        set->n_response_tokens = resp;
        set->temperature = c->temperature;
        set->top_p = c->top_p;
        set->top_k = c->top_k;
        set->temperature_given = c->temperature_given;
        set->top_p_given = c->top_p_given;
        set->top_k_given = c->top_k_given;
        set->kind = c->kind;
        set->kind_given = c->kind_given;
        set->whole_file = c->whole_file;
        set->format = c->format;
        set->lines_read = c->lines_read;
    }
    rc_rollouts_close(R);
    if (st == RC_OK && text_st != RC_OK)
        st = rc_errorf(text_st, "%s", text_err);
    return st;
}

/* The model, the rollouts (read and checked in a first pass, in bounded
 * memory), and the run's configuration: every rollout its own prompt, the
 * logged tokens and log-probs for the sampler, the trainer's temperature
 * from the log-prob kind. One chunk: the rollouts read again into the padded
 * tables (in); several: score_chunks reads them chunk by chunk. */
static rc_status score_load(run_ctx *x, const score_args *sa, rc_rollout_set *set, rc_score_inputs *in,
                            rc_score_align *text_notes, score_plan *pl)
{
    run_opts *ro = &x->ro;
    rc_rollout_format fmt = RC_RFMT_AUTO;
    if (sa->format)
        RC_TRY(rc_rollout_format_parse(sa->format, &fmt));
    int64_t chunk = RC_SCORE_CHUNK_ROLLOUTS;
    if (sa->chunk)
        RC_TRY(parse_i64("--chunk-rollouts", sa->chunk, 1, RC_ROLLOUT_MAX_COUNT, &chunk));
    RC_TRY(rc_model_load_layers(ro->model_dir, ro->layers, false, &x->m));
    const rc_config *mc = &x->m->cfg;
    char eos_w[512];
    if (rc_config_eos_warning(mc, eos_w, sizeof eos_w))
        fprintf(stderr, "ratiocheck: warning: %s: %s\n", ro->model_dir, eos_w);
    char *tp = rc_path_join(ro->model_dir, "tokenizer.json");
    bool have_tok = false;
    rc_status st = tp ? optional_file(tp, &have_tok) : rc_errorf(RC_ERR_NOMEM, "out of memory");
    if (st == RC_OK && have_tok)
        st = rc_tokenizer_load(tp, mc->vocab, &x->tok);
    free(tp);
    RC_TRY(st);
    RC_TRY(score_scan(x, sa, fmt, set, text_notes));
    /* the settings: the file's, else the command line's; both and different: refused */
    if (!set->kind_given)
        set->kind = sa->kind && !strcmp(sa->kind, "processed") ? RC_LP_PROCESSED : RC_LP_RAW;
    else if (sa->kind && (set->kind == RC_LP_PROCESSED) != !strcmp(sa->kind, "processed"))
        return rc_errorf(RC_ERR_USAGE, "--logprobs-kind %s: %s states %s log-probs", sa->kind, sa->rollouts,
                         set->kind == RC_LP_PROCESSED ? "processed" : "raw");
    const bool file_t = set->temperature_given, file_k = set->top_k_given, file_p = set->top_p_given;
    if (sa->temperature && file_t && set->temperature != ro->temperature)
        return rc_errorf(RC_ERR_USAGE, "--temperature %g: %s states %g", ro->temperature, sa->rollouts,
                         set->temperature);
    if (sa->top_k && file_k && set->top_k != ro->cfg.sampling.top_k)
        return rc_errorf(RC_ERR_USAGE, "--top-k %lld: %s states %lld", (long long)ro->cfg.sampling.top_k,
                         sa->rollouts, (long long)set->top_k);
    if (sa->top_p && file_p && set->top_p != ro->cfg.sampling.top_p)
        return rc_errorf(RC_ERR_USAGE, "--top-p %g: %s states %g", ro->cfg.sampling.top_p, sa->rollouts, set->top_p);
    if (sa->temperature && !file_t)
        set->temperature = ro->temperature;
    if (sa->top_k && !file_k)
        set->top_k = ro->cfg.sampling.top_k;
    if (sa->top_p && !file_p)
        set->top_p = ro->cfg.sampling.top_p;
    /* the chunks: at most `chunk` rollouts and RC_SCORE_CHUNK_CELLS padded
     * cells, whole forward batches when there is room for one */
    pl->fmt = fmt;
    pl->P = set->prompt_max;
    pl->G = set->resp_max > 0 ? set->resp_max : 1;
    const int64_t fb = x->ro.cfg.forward_batch > 0 ? x->ro.cfg.forward_batch : 64;
    int64_t rows = RC_SCORE_CHUNK_CELLS / (pl->P + pl->G);
    rows = rows < chunk ? rows : chunk;
    if (rows > fb)
        rows -= rows % fb;
    pl->rows = rows > 0 ? rows : 1;
    pl->chunked = set->n > pl->rows && !sa->sweep && !sa->check_only; /* a sweep replays every rollout at once */
    rc_rollout_cfg *cfg = &x->cfg;
    if (!ro->len_given) {
        cfg->n_lens = 1;
        cfg->lens[0] = pl->G;
    }
    if (set->resp_max < 1)
        return rc_errorf(RC_ERR_FORMAT, "%s: every response is empty", sa->rollouts);
    if (sa->check_only)
        return RC_OK;
    if (pl->chunked && (ro->show > 0 || ro->show_worst > 0))
        return rc_errorf(RC_ERR_USAGE, "--show / --show-worst: %s holds %lld rollouts, more than one chunk of %lld "
                         "(they need every rollout at once: --chunk-rollouts %lld)", sa->rollouts,
                         (long long)set->n, (long long)pl->rows, (long long)set->n);
    cfg->samples = 1;
    cfg->sampling.top_k = set->top_k;
    cfg->sampling.top_p = set->top_p;
    /* the trainer computes the distribution the log-probs were logged from */
    cfg->trainer_truncates = set->kind == RC_LP_PROCESSED && (set->top_k > 0 || set->top_p < 1.0);
    const double T = set->kind == RC_LP_RAW ? 1.0 : set->temperature;
    ro->temperature = T;
    cfg->num.temperature = cfg->num_trainer.temperature = (float)T;
    x->prompts_path = sa->rollouts;
    if (pl->chunked)
        return RC_OK;
    /* one chunk: every rollout read again into the padded tables */
    rc_rollout_set all;
    RC_TRY(rc_rollouts_load(sa->rollouts, fmt, mc->vocab, mc->max_pos, NULL, NULL, &all));
    st = rc_score_inputs_build_padded(&all, sa->rollouts, pl->P, pl->G, in);
    rc_rollouts_free(&all);
    RC_TRY(st);
    cfg->n_prompts = in->n;
    cfg->prompt_max = in->prompt_max;
    cfg->prompt_tokens = in->prompt_tokens;
    cfg->prompt_len = in->prompt_len;
    cfg->forced_tokens = in->tokens;
    cfg->forced_valid = in->valid;
    cfg->forced_len = in->resp_max;
    cfg->given_logprobs = in->logprobs;
    return RC_OK;
}

/* The backends of the trainer's side and the reference. */
static rc_status score_backends(run_ctx *x)
{
    const run_opts *ro = &x->ro;
    x->n_threads = ro->threads > 0 ? (int)ro->threads : omp_get_num_procs();
    if (x->use_cuda)
        omp_set_num_threads(x->n_threads);
    rc_status st = side_backends(x, &ro->sampler, &ro->trainer, &x->be, &x->trainer_be);
    x->cfg.trainer_be = x->trainer_be;
    if (st == RC_OK && x->cfg.reference == 32)
        st = backend_for(x, RC_KERNELS_INVARIANT, &x->ref_be);
    return st;
}

/* On more than 4 x RC_SCORE_SHIFT_ROLLOUTS rollouts in cfg, the first ones
 * are scored and checked for alignment first, so a misaligned file is
 * refused in seconds rather than after the whole forward. */
static rc_status score_probe(run_ctx *x, const rc_rollout_cfg *cfg, const rc_rollout_set *set, const char *path)
{
    if (cfg->n_prompts <= 4 * RC_SCORE_SHIFT_ROLLOUTS)
        return RC_OK;
    rc_rollout_cfg probe = *cfg; /* the first rollouts: the same rows of the same tables */
    probe.n_prompts = RC_SCORE_SHIFT_ROLLOUTS;
    probe.reference = 0;
    rc_results pr;
    memset(&pr, 0, sizeof pr);
    rc_score_align al;
    rc_status st = rc_run_check(x->m, x->be, NULL, &probe, NULL, NULL, &g_interrupted_flag, &pr);
    if (st == RC_OK)
        st = rc_score_check_alignment(set, path, &pr, &al);
    rc_results_free(&pr);
    return st;
}

/* The backends and the forward over every rollout at once. */
static rc_status score_compute(run_ctx *x, const rc_rollout_set *set, const char *path)
{
    rc_status st = score_backends(x);
    if (st == RC_OK)
        st = score_probe(x, &x->cfg, set, path);
    return st == RC_OK ? run_check_polled(x, x->be, x->ref_be, &x->cfg, &x->res) : st;
}

/* A file of more than one chunk (README "Memory and speed"): the rollouts
 * read again chunk by chunk, each padded to the file's widths, scored
 * (trainer forward and reference, as one run over its rows), checked for
 * alignment (the first chunk), fed to the statistics in file order and
 * written to the output's rows, then freed. x->res gets the statistics and
 * the sizes (no per-sequence arrays); *hs the output file being written
 * (NULL with --out none), which the caller finishes or aborts. */
static rc_status score_chunks(run_ctx *x, const score_args *sa, const score_plan *pl, const rc_rollout_set *set,
                              rc_score_align *al, rc_h5_stream **hs)
{
    *hs = NULL;
    rc_score_steady_heap();
    RC_TRY(score_backends(x));
    const rc_config *mc = &x->m->cfg;
    const double t0 = omp_get_wtime();
    rc_rollout_reader *R = NULL;
    RC_TRY(rc_rollouts_open(sa->rollouts, pl->fmt, mc->vocab, mc->max_pos, NULL, NULL, &R));
    rc_stats_acc *acc = NULL;
    rc_results *res = &x->res;
    double t_gen = 0, t_fwd = 0, t_ref = 0;
    int64_t done = 0;
    rc_status st = RC_OK;
    for (int chunk = 0; st == RC_OK; chunk++) {
        const rc_rollout_set *c;
        st = rc_rollouts_next(R, pl->rows, 0, &c);
        if (st != RC_OK || c->n == 0)
            break;
        if (done + c->n > set->n) { /* the file changed since the first pass */
            st = rc_errorf(RC_ERR_FORMAT, "%s: more rollouts than the %lld read before (was it changed?)",
                           sa->rollouts, (long long)set->n);
            break;
        }
        rc_score_inputs in;
        st = rc_score_inputs_build_padded(c, sa->rollouts, pl->P, pl->G, &in);
        if (st != RC_OK)
            break;
        rc_rollout_cfg cfg = x->cfg;
        cfg.n_prompts = in.n;
        cfg.prompt_max = in.prompt_max;
        cfg.prompt_tokens = in.prompt_tokens;
        cfg.prompt_len = in.prompt_len;
        cfg.forced_tokens = in.tokens;
        cfg.forced_valid = in.valid;
        cfg.forced_len = in.resp_max;
        cfg.given_logprobs = in.logprobs;
        rc_results cr;
        memset(&cr, 0, sizeof cr);
        if (chunk == 0)
            st = score_probe(x, &cfg, set, sa->rollouts);
        if (st == RC_OK)
            st = run_check_polled(x, x->be, x->ref_be, &cfg, &cr);
        if (st == RC_OK && chunk == 0)
            st = rc_score_check_alignment(set, sa->rollouts, &cr, al);
        if (st == RC_OK && chunk == 0) {
            int64_t lens[RC_MAX_LENS_READ];
            for (int i = 0; i < cr.n_lens && i < RC_MAX_LENS_READ; i++)
                lens[i] = cr.lens[i].len;
            st = rc_stats_acc_create(&cr.stat, cr.n_lens, lens, cr.logprob_ref != NULL, cr.entropy_gen != NULL,
                                     RC_STATS_EXACT_TOKENS, RC_STATS_EXACT_SEQUENCES, &acc);
        }
        if (st == RC_OK && x->out_path && x->tok) /* the completions, as run_record decodes them */
            st = decode_completions(x->tok, &cr);
        if (st == RC_OK && chunk == 0 && x->out_path)
            st = rc_h5_stream_begin(&cr, set->n, x->out_path, x->ro.force, hs);
        const float *fwd[RC_MAX_LENS_READ];
        double S[RC_MAX_LENS_READ], M[RC_MAX_LENS_READ];
        for (int64_t q = 0; q < cr.n_seq && st == RC_OK; q++) { /* file order: rollout done + q */
            const int64_t G = cr.gen_len;
            for (int i = 0; i < cr.n_lens; i++)
                fwd[i] = cr.lens[i].logprob_fwd + q * cr.lens[i].len;
            st = rc_stats_acc_add(acc, cr.gen_valid[q], cr.logprob_gen + q * G,
                                  cr.entropy_gen ? cr.entropy_gen + q * G : NULL,
                                  cr.logprob_ref ? cr.logprob_ref + q * G : NULL, fwd, S, M);
        }
        if (st == RC_OK && *hs)
            st = rc_h5_stream_rows(*hs, &cr);
        if (st == RC_OK && chunk == 0) { /* the run's shape, from the first chunk */
            res->n_lens = cr.n_lens;
            st = rc_calloc((void **)&res->lens, cr.n_lens + 1, sizeof *res->lens, "results");
            for (int i = 0; i < cr.n_lens && st == RC_OK; i++)
                res->lens[i].len = cr.lens[i].len;
            res->stat = cr.stat;
            res->gen_len = cr.gen_len; /* the longest length re-scored */
        }
        t_gen += cr.seconds_generate;
        t_fwd += cr.seconds_forward;
        t_ref += cr.seconds_reference;
        done += c->n;
        rc_results_free(&cr);
        rc_score_inputs_free(&in);
    }
    rc_rollouts_close(R);
    if (st == RC_OK && done != set->n)
        st = rc_errorf(RC_ERR_FORMAT, "%s: %lld rollouts, %lld read before (was it changed?)", sa->rollouts,
                       (long long)done, (long long)set->n);
    if (st == RC_OK) {
        res->n_prompts = res->n_seq = set->n;
        res->prompt_max = pl->P;
        res->seconds_generate = t_gen;
        res->seconds_forward = t_fwd;
        res->seconds_reference = t_ref;
        st = rc_stats_acc_finish(acc, res);
        res->seconds_total = omp_get_wtime() - t0;
    }
    rc_stats_acc_free(acc);
    if (st != RC_OK && *hs) {
        rc_h5_stream_abort(*hs);
        *hs = NULL;
    }
    return st;
}

static int cmd_score(int argc, char **argv, const char *cmdline)
{
    static run_ctx x;
    memset(&x, 0, sizeof x);
    score_args sa = {0};
    char **av = calloc((size_t)argc + 1, sizeof *av);
    if (!av)
        return fail(rc_errorf(RC_ERR_NOMEM, "out of memory"));
    int ac = 0;
    int code = score_split_args(argc, argv, &sa, av, &ac);
    if (code < 0)
        code = parse_run_args(ac, av, &x.ro);
    free(av);
    if (code >= 0)
        return code;
    x.out_kind = "score";
    x.ro.replay = sa.rollouts; /* the output must not be the input */
    if (sa.check_only)
        x.ro.out_path = "none";
    if (!sa.forward_batch) /* one forward over a million rollouts would not fit: groups of 64 */
        x.ro.cfg.forward_batch = x.ro.trainer.batch = 64;
    rc_rollout_set set;
    rc_score_inputs in;
    memset(&set, 0, sizeof set);
    memset(&in, 0, sizeof in);
    rc_score_align al, text_notes;
    score_plan plan;
    memset(&plan, 0, sizeof plan);
    rc_h5_stream *hs = NULL;
    memset(&al, 0, sizeof al);
    memset(&text_notes, 0, sizeof text_notes);
    rc_status st = run_prepare(&x);
    if (st == RC_OK)
        st = score_load(&x, &sa, &set, &in, &text_notes, &plan);
    for (int i = 0; i < text_notes.n_warnings; i++)
        fprintf(stderr, "ratiocheck: warning: %s\n", text_notes.warnings[i]);
    if (st == RC_OK && sa.check_only) { /* what the file holds, no forward pass */
        const int64_t toks = set.n_tokens, resp = set.n_response_tokens;
        printf("%s: %s, %lld rollouts, %lld prompt + %lld response tokens (longest %lld + %lld), %s log-probs, "
               "temperature %g, top_k %lld, top_p %g: OK for %s\n", sa.rollouts, rc_rollout_format_name(set.format),
               (long long)set.n, (long long)(toks - resp), (long long)resp, (long long)set.prompt_max,
               (long long)set.resp_max, set.kind == RC_LP_RAW ? "raw" : "processed", set.temperature,
               (long long)set.top_k, set.top_p, x.ro.model_dir);
        rc_rollouts_free(&set);
        rc_score_inputs_free(&in);
        run_free(&x);
        return 0;
    }
    static sweep_setting vset[MAX_SWEEP];
    int n_set = 0;
    for (int i = 0; i < sa.n_vary && st == RC_OK; i++) { /* every --vary spec, before any work */
        side sm, tr;
        st = parse_vary(sa.vary[i], &vset[n_set]);
        if (st == RC_OK)
            st = sweep_sides(&x.ro, &vset[n_set++], &sm, &tr);
    }
    if (st == RC_OK && plan.chunked) {
        st = score_chunks(&x, &sa, &plan, &set, &al, &hs);
    } else if (st == RC_OK) {
        st = score_compute(&x, &set, sa.rollouts);
        if (st == RC_OK)
            st = rc_score_check_alignment(&set, sa.rollouts, &x.res, &al);
    }
    if (st == RC_OK && sa.sweep && n_set == 0) { /* the trainer's side of sweep's defaults */
        static sweep_setting all[MAX_SWEEP];
        const int n_all = default_settings(&x, all);
        for (int i = 0; i < n_all; i++) {
            if (!(all[i].sides & 2))
                continue;
            bool dup = false;
            for (int k = 0; k < n_set; k++)
                dup |= !strcmp(vset[k].spec, all[i].spec);
            if (dup)
                continue;
            vset[n_set] = all[i];
            vset[n_set].sides = 2;
            snprintf(vset[n_set].name, sizeof vset[n_set].name, "trainer: %s", all[i].spec);
            n_set++;
        }
    }
    if (st == RC_OK && sa.sweep)
        st = sweep_run(&x, vset, n_set);
    if (st == RC_OK) {
        for (int i = 0; i < al.n_warnings; i++)
            fprintf(stderr, "ratiocheck: warning: %s: %s\n", sa.rollouts, al.warnings[i]);
        char tr[160];
        side_str(&x.ro.trainer, true, tr, sizeof tr);
        snprintf(x.res.trainer, sizeof x.res.trainer, "%s", tr);
        snprintf(x.res.sampler, sizeof x.res.sampler, "logged (%s file, %s log-probs, temperature %g, top_k %lld, "
                 "top_p %g)", rc_rollout_format_name(set.format), set.kind == RC_LP_RAW ? "raw" : "processed",
                 set.temperature, (long long)set.top_k, set.top_p);
        rc_rollouts_free(&set); /* the results hold everything from here on */
        rc_score_inputs_free(&in);
        if (plan.chunked) { /* the settings (the completions went with their chunks), then the file's
                               statistics and rename */
            st = run_settings(&x, cmdline);
            if (st == RC_OK && hs)
                st = rc_h5_stream_finish(hs, &x.res);
            else if (hs)
                rc_h5_stream_abort(hs);
            hs = NULL;
        } else {
            st = run_record(&x, cmdline);
        }
    }
    if (hs)
        rc_h5_stream_abort(hs);
    code = st == RC_OK ? run_report(&x) : fail(st);
    rc_rollouts_free(&set);
    rc_score_inputs_free(&in);
    run_free(&x);
    return code;
}

/* ------------------------------------------------------------------------ */
/* ratiocheck sweep                                                          */


/* "sampler:SPEC", "trainer:SPEC" or "both:SPEC" (--vary) */
static rc_status parse_vary(const char *v, sweep_setting *out)
{
    const char *colon = strchr(v, ':');
    if (!colon || !colon[1])
        return rc_errorf(RC_ERR_USAGE, "--vary '%s': expected SIDE:KEY=VALUE[,...] with SIDE sampler, trainer or "
                         "both", v);
    const size_t n = (size_t)(colon - v);
    if (n == 7 && !strncmp(v, "sampler", 7))
        out->sides = 1;
    else if (n == 7 && !strncmp(v, "trainer", 7))
        out->sides = 2;
    else if (n == 4 && !strncmp(v, "both", 4))
        out->sides = 3;
    else
        return rc_errorf(RC_ERR_USAGE, "--vary '%s': the side must be sampler, trainer or both", v);
    if (strlen(colon + 1) >= sizeof out->spec)
        return rc_errorf(RC_ERR_USAGE, "--vary '%s': longer than %zu bytes", v, sizeof out->spec - 1);
    snprintf(out->spec, sizeof out->spec, "%s", colon + 1);
    snprintf(out->name, sizeof out->name, "%.*s: %s", (int)n, v, colon + 1);
    return RC_OK;
}

/* the base's sides with the setting applied (a usage error for a bad spec) */
static rc_status sweep_sides(const run_opts *ro, const sweep_setting *set, side *sm, side *tr)
{
    *sm = ro->sampler;
    *tr = ro->trainer;
    if (set->sides & 1)
        RC_TRY(parse_side("--vary sampler", set->spec, false, sm));
    if (set->sides & 2)
        RC_TRY(parse_side("--vary trainer", set->spec, true, tr));
    return RC_OK;
}

static int add_setting(sweep_setting *t, int n, unsigned sides, const char *spec)
{
    if (n >= MAX_SWEEP)
        return n;
    t[n].sides = sides;
    snprintf(t[n].spec, sizeof t[n].spec, "%s", spec);
    snprintf(t[n].name, sizeof t[n].name, "%s: %s", sides == 3 ? "both" : sides == 1 ? "sampler" : "trainer", spec);
    return n + 1;
}

/* The default variables (README "Sweep"), each one step from the base. */
static int default_settings(const run_ctx *x, sweep_setting *t)
{
    const side *sm = &x->ro.sampler, *tr = &x->ro.trainer;
    int n = 0;
    n = add_setting(t, n, 3, sm->dt == RC_F16 ? "dtype=bf16" : "dtype=fp16");
    if (!(tr->upcast & RC_UPCAST_LM_HEAD))
        n = add_setting(t, n, 2, "lm-head=fp32");
    if (!(sm->upcast & RC_UPCAST_LM_HEAD) || !(tr->upcast & RC_UPCAST_LM_HEAD))
        n = add_setting(t, n, 3, "lm-head=fp32");
    static const struct {
        unsigned bit;
        const char *spec;
    } ups[] = {{RC_UPCAST_SOFTMAX, "upcast=softmax"}, {RC_UPCAST_NORM, "upcast=norm"}, {RC_UPCAST_ROPE, "upcast=rope"}};
    for (size_t i = 0; i < sizeof ups / sizeof ups[0]; i++)
        if (!(sm->upcast & ups[i].bit) || !(tr->upcast & ups[i].bit))
            n = add_setting(t, n, 3, ups[i].spec);
    if (tr->mode != RC_PREC_AUTOCAST)
        n = add_setting(t, n, 2, "mode=autocast");
    if (sm->kernels != RC_KERNELS_INVARIANT || tr->kernels != RC_KERNELS_INVARIANT)
        n = add_setting(t, n, 3, "kernels=invariant");
    int64_t longest = 0; /* the prompts' longest: a chunk of half of it splits it */
    for (int64_t p = 0; p < x->cfg.n_prompts; p++)
        if (x->cfg.prompt_len[p] > longest)
            longest = x->cfg.prompt_len[p];
    if (longest >= 2 && sm->prefill_chunk == 0) {
        char spec[64];
        snprintf(spec, sizeof spec, "prefill-chunk=%lld", (long long)((longest + 1) / 2));
        n = add_setting(t, n, 1, spec);
        if (tr->prefill_chunk == 0)
            n = add_setting(t, n, 2, spec);
    }
    if (sm->tp <= 1 && tr->tp <= 1) { /* a degree the model's heads do not allow is listed as skipped */
        n = add_setting(t, n, 1, "tp=2");
        n = add_setting(t, n, 1, "tp=4");
        n = add_setting(t, n, 1, "tp=8");
        n = add_setting(t, n, 3, "tp=2");
    }
    if (sm->kv_quant == RC_KV_AUTO)
        n = add_setting(t, n, 1, "kv-cache=fp8_e4m3");
    if (sm->batch != 1)
        n = add_setting(t, n, 1, "batch=1");
    if (tr->batch != 1)
        n = add_setting(t, n, 2, "micro-batch=1");
    if (sm->wq.kind != RC_WQ_FP8) /* an fp8 rollout engine: vLLM's online fp8 (per-tensor weights, per-token acts) */
        n = add_setting(t, n, 1, "weights=fp8");
    return n;
}

/* Replay the base's rollouts with these sides: their log-probs and
 * statistics into out. */
static rc_status sweep_replay(run_ctx *x, const side *sm, const side *tr, rc_results *out)
{
    rc_rollout_cfg cfg = x->cfg;
    cfg_apply_sides(sm, tr, x->ro.temperature, &cfg);
    cfg.reference = 0;
    cfg.forced_tokens = x->res.gen_tokens;
    cfg.forced_valid = x->res.gen_valid;
    cfg.forced_len = x->res.gen_len;
    if (cfg.given_logprobs) /* ratiocheck score: the logged log-probs, in the results' layout */
        cfg.given_logprobs = x->res.logprob_gen;
    rc_backend *be, *tbe;
    rc_status st = side_backends(x, sm, tr, &be, &tbe);
    cfg.trainer_be = tbe;
    if (st == RC_OK)
        st = run_check_polled(x, be, NULL, &cfg, out);
    rc_backend_destroy(be);
    rc_backend_destroy(tbe);
    return st;
}

/* every setting replayed over the base's rollouts, into x->res.sweep: the
 * noise floor (the base again) first */
static rc_status sweep_run(run_ctx *x, const sweep_setting *set, int n_set)
{
    RC_TRY(rc_calloc((void **)&x->res.sweep, n_set + 1, sizeof *x->res.sweep, "sweep rows"));
    for (int i = 0; i <= n_set; i++) {
        rc_sweep_row *row = &x->res.sweep[i];
        x->res.n_sweep = i + 1;
        side sm = x->ro.sampler, tr = x->ro.trainer;
        if (i == 0) {
            snprintf(row->name, sizeof row->name, "base again (noise floor)");
            row->noise_floor = true;
        } else {
            snprintf(row->name, sizeof row->name, "%s", set[i - 1].name);
            RC_TRY(sweep_sides(&x->ro, &set[i - 1], &sm, &tr)); /* parsed once before: cannot fail */
        }
        side_str(&sm, false, row->sampler, sizeof row->sampler);
        side_str(&tr, true, row->trainer, sizeof row->trainer);
        row->invariant = sm.kernels == RC_KERNELS_INVARIANT && tr.kernels == RC_KERNELS_INVARIANT &&
                         !(x->ro.sampler.kernels == RC_KERNELS_INVARIANT && x->ro.trainer.kernels == RC_KERNELS_INVARIANT);
        rc_status st = check_side("sampler", &sm);
        if (st == RC_OK)
            st = check_side("trainer", &tr);
        if (!x->ro.quiet && isatty(STDERR_FILENO))
            fprintf(stderr, "sweep %d/%d: %s\n", i + 1, n_set + 1, row->name);
        if (st == RC_OK) {
            RC_TRY(rc_calloc((void **)&row->res, 1, sizeof *row->res, "sweep results"));
            st = sweep_replay(x, &sm, &tr, row->res);
        }
        if (st == RC_ERR_USAGE || st == RC_ERR_UNSUPPORTED) { /* this setting cannot run here: say why */
            snprintf(row->skipped, sizeof row->skipped, "%s", rc_last_error());
            rc_clear_error();
            if (row->res) {
                rc_results_free(row->res);
                free(row->res);
                row->res = NULL;
            }
        } else if (st != RC_OK) {
            return st;
        }
    }
    rc_sweep_summarise(&x->res);
    return RC_OK;
}

static const char k_sweep_usage[] =
    "Usage: ratiocheck sweep [RUN OPTIONS] [--vary SIDE:SPEC]...\n"
    "\n"
    "Samples the rollouts once with the base configuration (the run options,\n"
    "--sampler / --trainer), then replays the same tokens with one setting changed\n"
    "at a time, and prints one row per setting at the longest length: ratio std,\n"
    "k3, clip fraction, mean exp|log r|, the GSPO and sequence-IS fractions and the\n"
    "std against the base's. The first row replays the base itself: the noise\n"
    "floor, which must be identical. The setting that lowers k3 the most is named.\n"
    "Output: the base's results with /sweep (one group per setting) in the HDF5\n"
    "file (default MODEL.DTYPE.sweep.h5), \"sweep\" in --json.\n"
    "\n"
    "  --vary SIDE:SPEC   a setting of its own instead of the default list: SPEC as\n"
    "                     in --sampler / --trainer, applied to SIDE = sampler,\n"
    "                     trainer or both; repeat for more rows, e.g.\n"
    "                     --vary trainer:lm-head=fp32 --vary both:dtype=fp16\n"
    "Default list: both dtype=fp16 (bf16 when the base is fp16), trainer and both\n"
    "lm-head=fp32, both upcast=softmax / norm / rope, trainer mode=autocast, both\n"
    "kernels=invariant, sampler and trainer prefill-chunk (half the longest\n"
    "prompt), sampler tp=2 / 4 / 8, both tp=2, sampler kv-cache=fp8_e4m3,\nsampler batch=1, trainer micro-batch=1. A setting the model or "
    "backend cannot run is listed as skipped with the reason.\n"
    "\n"
    "Every option of the run command applies to the base:\n\n";

static int cmd_sweep(int argc, char **argv, const char *cmdline)
{
    static run_ctx x;
    static sweep_setting set[MAX_SWEEP];
    static char *rest[4096];
    memset(&x, 0, sizeof x);
    x.out_kind = "sweep";
    int n_set = 0, n_rest = 0;
    bool help = false;
    if (argc > (int)(sizeof rest / sizeof rest[0]))
        return usage_error("sweep: too many arguments");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (i > 0 && (!strcmp(a, "--help") || !strcmp(a, "-h")))
            help = true;
        if (i > 0 && (!strcmp(a, "--vary") || !strncmp(a, "--vary=", 7))) {
            const char *v = a[6] == '=' ? a + 7 : i + 1 < argc ? argv[++i] : NULL;
            if (!v)
                return usage_error("sweep: --vary needs SIDE:SPEC");
            if (n_set >= MAX_SWEEP)
                return usage_error("sweep: at most %d --vary settings", MAX_SWEEP);
            rc_status st = parse_vary(v, &set[n_set]);
            if (st != RC_OK)
                return fail(st);
            n_set++;
            continue;
        }
        rest[n_rest++] = argv[i];
    }
    if (help) {
        fputs(k_sweep_usage, stdout);
        char *h[] = {rest[0], "--help", NULL};
        return parse_run_args(2, h, &x.ro);
    }
    int code = parse_run_args(n_rest, rest, &x.ro);
    if (code >= 0)
        return code;
    for (int i = 0; i < n_set; i++) { /* every --vary spec, before any work */
        side sm, tr;
        rc_status st = sweep_sides(&x.ro, &set[i], &sm, &tr);
        if (st != RC_OK)
            return fail(st);
    }
    rc_status st = run_prepare(&x);
    if (st == RC_OK)
        st = run_load(&x);
    if (st == RC_OK && n_set == 0)
        n_set = default_settings(&x, set);
    if (st == RC_OK)
        st = run_compute(&x);
    if (st == RC_OK)
        st = sweep_run(&x, set, n_set);
    if (st == RC_OK)
        st = run_record(&x, cmdline);
    code = st == RC_OK ? run_report(&x) : fail(st);
    run_free(&x);
    return code;
}

/* The command line, shell-quoted where needed (stored in the results). */
/* ------------------------------------------------------------------------ */
/* ratiocheck trace                                                          */

#define MAX_TRACE_SEQS 64

typedef struct {
    const char *in, *model_dir, *out_path, *sampler_spec, *trainer_spec, *backend, *seq_list;
    int64_t worst, threads;
    bool force, json, quiet, help;
} trace_opts;

#define TO(f) offsetof(trace_opts, f)
static const opt_spec k_trace_opts[] = {
    {"in", 0, "RUN.h5", "the run's result file (or give it as the operand)", "Input:", op_path, TO(in), 0, 0},
    {"model", 0, "DIR", "the model folder (default: the run's model_path)", NULL, op_path, TO(model_dir), 0, 0},
    {"worst", 0, "K", "trace the K sequences with the largest |S| (sum of log r\nat the longest length) (default 1)",
     "Sequences:", op_i64, TO(worst), 1, MAX_TRACE_SEQS},
    {"seq", 0, "LIST", "trace these sequences (0-based, as in the HDF5 file),\ne.g. 3,17", NULL, op_path,
     TO(seq_list), 0, 0},
    {"sampler", 0, "SPEC", "change the run's sampler side (KEY=VALUE,..., as run's)", "Sides (default: the run's):",
     op_path, TO(sampler_spec), 0, 0},
    {"trainer", 0, "SPEC", "change the run's trainer side", NULL, op_path, TO(trainer_spec), 0, 0},
    {"out", 0, "FILE|none", "the run file with /trace added (default:\nRUN.trace.h5 in the current folder)",
     "Output:", op_path, TO(out_path), 0, 0},
    {"force", 0, NULL, "overwrite the output file", NULL, op_flag, TO(force), 0, 0},
    {"json", 0, NULL, "print one JSON object instead of the table", NULL, op_flag, TO(json), 0, 0},
    {"threads", 0, "N", "CPU threads (default: all cores)", NULL, op_i64, TO(threads), 1, 1024},
    {"backend", 0, "cpu|cuda|auto", "where to compute (as run's --backend)", NULL, op_path, TO(backend), 0, 0},
    {"quiet", 'q', NULL, "no progress bar", NULL, op_flag, TO(quiet), 0, 0},
    OPT_HELP(trace_opts),
};
#undef TO

static const char k_trace_usage[] =
    "Usage: ratiocheck trace RUN.h5 [--worst K | --seq LIST] [OPTIONS]\n"
    "\n"
    "Replays a run (its tokens, its sampler and trainer) while capturing every op's\n"
    "output per layer and position for the traced sequences, compares the two sides\n"
    "per layer and op (bitwise-equal fraction, max |difference|, relative L2, max\n"
    "ulp distance), and names the first (layer, op, position, element) where they\n"
    "part.\n"
    "\n";

/* "3,17" into distinct sequence indices of a run of n_seq */
static rc_status parse_seq_list(const char *v, const char *path, int64_t n_seq, int64_t *out, int64_t *n_out)
{
    int64_t n = 0;
    char buf[32];
    for (const char *p = v;;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || len >= sizeof buf)
            return rc_errorf(RC_ERR_USAGE, "--seq: '%s' is not a list of sequence indices (e.g. 3,17)", v);
        memcpy(buf, p, len);
        buf[len] = '\0';
        int64_t q;
        RC_TRY(parse_i64("--seq", buf, 0, INT64_MAX, &q));
        if (q >= n_seq)
            return rc_errorf(RC_ERR_USAGE, "--seq %lld: %s has %lld sequences (0 to %lld)", (long long)q, path,
                             (long long)n_seq, (long long)n_seq - 1);
        for (int64_t i = 0; i < n; i++)
            if (out[i] == q)
                return rc_errorf(RC_ERR_USAGE, "--seq: sequence %lld is listed twice", (long long)q);
        if (n == MAX_TRACE_SEQS)
            return rc_errorf(RC_ERR_USAGE, "--seq: at most %d sequences", MAX_TRACE_SEQS);
        out[n++] = q;
        if (!e)
            break;
        p = e + 1;
    }
    *n_out = n;
    return RC_OK;
}

/* The run's two sides from its file's root attributes (the sides' strings
 * when the run had --sampler / --trainer), then the specs given here. */
static rc_status trace_sides(const rc_results *f, const char *path, const trace_opts *to, run_opts *ro)
{
    side base = {RC_BF16, RC_KERNELS_ENGINE, 0, false, f->batch, f->forward_batch, RC_PREC_PURE, RC_KV_AUTO, 1.0f, 1,
                 RC_TP_REDUCE_FP32, {0}, false};
    rc_status st = parse_dtype(f->dtype, &base.dt);
    if (st == RC_OK)
        st = parse_kernels("kernels", f->kernels, &base.kernels);
    if (st == RC_OK)
        st = rc_parse_upcast(f->upcast, &base.upcast);
    if (st == RC_OK)
        st = parse_lpdt("logprob_dtype", strcmp(f->logprob_dtype, "fp32") ? "same" : "fp32", &base.lp_same);
    ro->sampler = ro->trainer = base;
    ro->trainer.tp_reduce = RC_TP_REDUCE_RING;
    if (st == RC_OK && f->sampler[0])
        st = parse_side("the run's sampler", f->sampler, false, &ro->sampler);
    if (st == RC_OK && f->trainer[0])
        st = parse_side("the run's trainer", f->trainer, true, &ro->trainer);
    if (st != RC_OK) /* the file's settings do not read as settings */
        return rc_errorf(RC_ERR_FORMAT, "%s: %s", path, rc_last_error());
    if (to->sampler_spec)
        RC_TRY(parse_side("--sampler", to->sampler_spec, false, &ro->sampler));
    if (to->trainer_spec)
        RC_TRY(parse_side("--trainer", to->trainer_spec, true, &ro->trainer));
    RC_TRY(check_side("--sampler", &ro->sampler));
    return check_side("--trainer", &ro->trainer);
}

/* "layer 3" / "embedding" / "final" */
static const char *trace_layer_str(int64_t layer, int64_t n_layers, char *buf, size_t n)
{
    if (layer < 0)
        snprintf(buf, n, "embed");
    else if (layer >= n_layers)
        snprintf(buf, n, "final");
    else
        snprintf(buf, n, "%lld", (long long)layer);
    return buf;
}

/* the cells [sl0, sl1) x [op0, op1) of a trace together */
typedef struct {
    int64_t count;
    double differ, max_ulp, max_abs, max_rel_l2, last_rel_l2; /* last: of the last op present (the output) */
    const char *first_op;                                      /* the first op that differs, "-" */
} trace_agg;

static trace_agg trace_aggregate(const rc_trace_table *tt, int64_t sl0, int64_t sl1, int op0, int op1)
{
    trace_agg a = {0, 0, 0, 0, 0, NAN, "-"};
    int64_t eq = 0;
    for (int64_t sl = sl0; sl < sl1; sl++)
        for (int op = op0; op < op1; op++) {
            const rc_trace_cell *c = &tt->cells[sl * RC_TOP_COUNT + op];
            if (c->count == 0)
                continue;
            a.count += c->count;
            eq += c->equal;
            a.max_ulp = c->max_ulp > a.max_ulp ? c->max_ulp : a.max_ulp;
            a.max_abs = c->max_abs > a.max_abs ? c->max_abs : a.max_abs;
            a.max_rel_l2 = c->rel_l2 > a.max_rel_l2 ? c->rel_l2 : a.max_rel_l2;
            a.last_rel_l2 = c->rel_l2;
            if (c->equal < c->count && !strcmp(a.first_op, "-"))
                a.first_op = rc_trace_op_name((rc_trace_op)op);
        }
    a.differ = a.count ? (double)(a.count - eq) / (double)a.count : NAN;
    return a;
}

static void print_trace_table(const rc_trace_out *to, const char *in, const char *out_path, int64_t worst,
                              double seconds)
{
    const rc_trace_table *tt = to->table;
    const rc_trace_first *f = &tt->first;
    char lb[32];
    printf("trace of %s at L = %lld: sequence%s", in, (long long)to->len, tt->n_seq > 1 ? "s" : "");
    for (int64_t k = 0; k < tt->n_seq; k++)
        printf("%s %lld", k ? "," : "", (long long)tt->seq[k]);
    if (worst > 0)
        printf(" (the %lld with the largest |S|)", (long long)tt->n_seq);
    printf(", replayed in %.1f s\n", seconds);
    printf("  sampler  %s\n  trainer  %s\n", to->sampler, to->trainer);
    printf("  replay   %lld of %lld generation and %lld of %lld forward log-probs bitwise the file's\n",
           (long long)to->replay_equal_gen, (long long)to->replay_tokens, (long long)to->replay_equal_fwd,
           (long long)to->replay_tokens);
    if (!f->found) {
        printf("first divergence: none (every captured op output is bitwise equal on both sides)\n");
    } else {
        printf("first divergence: %s%s, %s, sequence %lld, position %lld, element %lld: sampler %.9g, trainer "
               "%.9g (%.3g ulp; the calls computed %lld and %lld rows)\n",
               f->layer >= 0 && f->layer < to->n_layers ? "layer " : "", trace_layer_str(f->layer, to->n_layers, lb,
               sizeof lb), rc_trace_op_name(f->op), (long long)f->sequence,
               (long long)f->position, (long long)f->element, (double)f->sampler, (double)f->trainer, f->ulp,
               (long long)f->sampler_rows, (long long)f->trainer_rows);
    }
    for (int64_t k = 0; tt->n_seq > 1 && k < tt->n_seq; k++) { /* each sequence's own */
        const rc_trace_first *sf = &tt->seq_first[k];
        if (!sf->found)
            printf("  sequence %lld: none\n", (long long)tt->seq[k]);
        else
            printf("  sequence %lld: %s%s, %s, position %lld, element %lld\n", (long long)tt->seq[k],
                   sf->layer >= 0 && sf->layer < to->n_layers ? "layer " : "",
                   trace_layer_str(sf->layer, to->n_layers, lb, sizeof lb), rc_trace_op_name(sf->op),
                   (long long)sf->position, (long long)sf->element);
    }
    /* per layer: the first op that differs, the share of differing elements, the worst ulp and
     * |d|, the layer output's rel L2; then the same per op over the layers */
    printf("\n%-6s %-11s %9s %9s %9s %11s\n", "layer", "first op", "differ", "max ulp", "max |d|", "out rel L2");
    for (int64_t sl = 0; sl < tt->n_slots; sl++) {
        trace_agg a = trace_aggregate(tt, sl, sl + 1, 0, RC_TOP_COUNT);
        if (a.count > 0)
            printf("%-6s %-11s %9.3g %9.3g %9.3g %11.3g\n", trace_layer_str(sl - 1, to->n_layers, lb, sizeof lb),
                   a.first_op, a.differ, a.max_ulp, a.max_abs, a.last_rel_l2);
    }
    printf("\n%-11s %9s %9s %9s %11s\n", "op", "differ", "max ulp", "max |d|", "max rel L2");
    for (int op = 0; op < RC_TOP_COUNT; op++) {
        trace_agg a = trace_aggregate(tt, 0, tt->n_slots, op, op + 1);
        if (a.count > 0)
            printf("%-11s %9.3g %9.3g %9.3g %11.3g\n", rc_trace_op_name((rc_trace_op)op), a.differ, a.max_ulp,
                   a.max_abs, a.max_rel_l2);
    }
    printf("\ndiffer: the fraction of elements not bitwise equal (every position both sides computed); max ulp: of\n"
           "the coarser side's dtype of the op; out rel L2: ||sampler - trainer|| / ||trainer|| of the layer's\n"
           "output (the residual stream; final: the logits); first op: the first op that differs, in forward order\n");
    if (out_path)
        printf("written: %s (/trace; tools/plot_ratios.py draws its layer x op heatmap)\n", out_path);
}

static void print_trace_json(const rc_trace_out *to, const char *in, const char *out_path, double seconds)
{
    const rc_trace_table *tt = to->table;
    const rc_trace_first *f = &tt->first;
    printf("{\"input\": ");
    json_str(stdout, in);
    printf(", \"output\": ");
    if (out_path)
        json_str(stdout, out_path);
    else
        printf("null");
    printf(", \"sampler\": ");
    json_str(stdout, to->sampler);
    printf(", \"trainer\": ");
    json_str(stdout, to->trainer);
    printf(", \"len\": %lld, \"layers\": %lld, \"sequences\": [", (long long)to->len, (long long)to->n_layers);
    for (int64_t k = 0; k < tt->n_seq; k++)
        printf("%s%lld", k ? ", " : "", (long long)tt->seq[k]);
    printf("], \"replay_tokens\": %lld, \"replay_equal_gen\": %lld, \"replay_equal_fwd\": %lld, ",
           (long long)to->replay_tokens, (long long)to->replay_equal_gen, (long long)to->replay_equal_fwd);
    json_num(stdout, "seconds", seconds, true);
    printf("\"first\": ");
    if (!f->found) {
        printf("null");
    } else {
        printf("{\"layer\": %lld, \"op\": \"%s\", \"sequence\": %lld, \"position\": %lld, \"element\": %lld, ",
               (long long)f->layer, rc_trace_op_name(f->op), (long long)f->sequence, (long long)f->position,
               (long long)f->element);
        json_num(stdout, "sampler", (double)f->sampler, true);
        json_num(stdout, "trainer", (double)f->trainer, true);
        json_num(stdout, "ulp", f->ulp, true);
        printf("\"sampler_rows\": %lld, \"trainer_rows\": %lld}", (long long)f->sampler_rows,
               (long long)f->trainer_rows);
    }
    printf(", \"seq_first\": [");
    for (int64_t k = 0; k < tt->n_seq; k++) {
        const rc_trace_first *sf = &tt->seq_first[k];
        if (sf->found)
            printf("%s{\"sequence\": %lld, \"layer\": %lld, \"op\": \"%s\", \"position\": %lld, \"element\": %lld}",
                   k ? ", " : "", (long long)tt->seq[k], (long long)sf->layer, rc_trace_op_name(sf->op),
                   (long long)sf->position, (long long)sf->element);
        else
            printf("%s{\"sequence\": %lld, \"layer\": null}", k ? ", " : "", (long long)tt->seq[k]);
    }
    printf("], \"cells\": [");
    bool any = false;
    for (int64_t sl = 0; sl < tt->n_slots; sl++)
        for (int op = 0; op < RC_TOP_COUNT; op++) {
            const rc_trace_cell *c = &tt->cells[sl * RC_TOP_COUNT + op];
            if (c->count == 0)
                continue;
            printf("%s{\"layer\": %lld, \"op\": \"%s\", \"count\": %lld, ", any ? ", " : "", (long long)sl - 1,
                   rc_trace_op_name((rc_trace_op)op), (long long)c->count);
            json_num(stdout, "equal_frac", (double)c->equal / (double)c->count, true);
            json_num(stdout, "max_abs", c->max_abs, true);
            json_num(stdout, "rel_l2", c->rel_l2, true);
            json_num(stdout, "max_ulp", c->max_ulp, false);
            printf("}");
            any = true;
        }
    printf("]}\n");
}

static int cmd_trace(int argc, char **argv)
{
    static run_ctx x; /* large; one trace per process */
    memset(&x, 0, sizeof x);
    trace_opts to = {.backend = "auto"};
    int code = parse_opts(argc, argv, k_trace_opts, sizeof k_trace_opts / sizeof k_trace_opts[0], &to,
                          offsetof(trace_opts, help), k_trace_usage);
    if (code >= 0)
        return code;
    if (optind < argc && !to.in)
        to.in = argv[optind++];
    if (optind < argc)
        return usage_error("trace: unexpected argument '%s'", argv[optind]);
    if (!to.in)
        return usage_error("trace: give the run's result file (ratiocheck trace RUN.h5)");
    if (to.worst > 0 && to.seq_list)
        return usage_error("--worst and --seq cannot be combined");
    if (strcmp(to.backend, "cpu") && strcmp(to.backend, "cuda") && strcmp(to.backend, "auto"))
        return usage_error("--backend: '%s' is not one of cpu, cuda, auto", to.backend);
    rc_results orig;
    memset(&orig, 0, sizeof orig);
    rc_trace *tr = NULL;
    float *lp = NULL;
    char out_default[4096], sd_s[192], sd_t[192];
    int64_t seqs[MAX_TRACE_SEQS], n_sel = 0;
    rc_status st = rc_h5_read(to.in, &orig);
    run_opts *ro = &x.ro;
    if (st == RC_OK && orig.n_lens < 1)
        st = rc_errorf(RC_ERR_FORMAT, "%s: the run re-scored no length", to.in);
    if (st == RC_OK && orig.n_sweep > 0)
        st = rc_errorf(RC_ERR_UNSUPPORTED, "%s: a sweep's file; trace the run of one setting (ratiocheck run "
                       "--rollouts-from)", to.in);
    if (st == RC_OK && !to.model_dir && !(orig.model_path && orig.model_path[0]))
        st = rc_errorf(RC_ERR_USAGE, "%s records no model folder: give --model", to.in);
    if (st == RC_OK) { /* run's options as the file's run had them */
        ro->model_dir = to.model_dir ? to.model_dir : orig.model_path;
        ro->replay = to.in;
        ro->backend = to.backend;
        ro->threads = to.threads;
        ro->quiet = to.quiet || to.json;
        ro->len_given = true;
        ro->out_path = "none";
        ro->temperature = orig.temperature;
        ro->cfg = (rc_rollout_cfg){.samples = orig.samples, .sampling = {.top_k = (int)orig.top_k, .top_p = orig.top_p},
                                   .num = rc_numerics_fp32(), .stat = orig.stat};
        ro->cfg.num.alibi_rowmax = !strcmp(orig.alibi_bias, "rowmax");
        ro->cfg.n_lens = 1;
        ro->cfg.lens[0] = orig.lens[orig.n_lens - 1].len;
        st = trace_sides(&orig, to.in, &to, ro);
    }
    if (st == RC_OK) {
        ro->cfg.batch = ro->sampler.batch;
        ro->cfg.forward_batch = ro->trainer.batch;
        if (to.seq_list) {
            st = parse_seq_list(to.seq_list, to.in, orig.n_seq, seqs, &n_sel);
        } else {
            int64_t *idx = show_pick(&orig, 0, to.worst > 0 ? to.worst : 1, &n_sel);
            if (!idx)
                st = rc_errorf(RC_ERR_NOMEM, "out of memory");
            for (int64_t k = 0; idx && k < n_sel; k++)
                seqs[k] = idx[k];
            free(idx);
        }
    }
    const char *out_path = to.out_path;
    if (st == RC_OK && !out_path) { /* RUN.trace.h5 in the current folder */
        const char *base = strrchr(to.in, '/');
        base = base ? base + 1 : to.in;
        size_t bl = strlen(base);
        if (bl > 3 && !strcmp(base + bl - 3, ".h5"))
            bl -= 3;
        snprintf(out_default, sizeof out_default, "%.*s.trace.h5", (int)(bl < 4000 ? bl : 4000), base);
        out_path = out_default;
    }
    if (st == RC_OK && !strcmp(out_path, "none"))
        out_path = NULL;
    if (st == RC_OK && out_path) {
        rc_h5_remove_stale_temps(out_path, note_stale);
        st = rc_h5_check_output(out_path, to.force);
        if (st == RC_OK)
            st = check_out_not_input(out_path, ro->model_dir, to.in);
    }
    if (st == RC_OK)
        st = run_prepare(&x);
    if (st == RC_OK)
        st = run_load(&x);
    const int64_t L = ro->cfg.lens[0];
    if (st == RC_OK)
        st = rc_trace_create(&x.m->cfg, orig.n_seq, seqs, n_sel, x.cfg.prompt_max + L, &tr);
    const double t0 = mono_now();
    bool *only = NULL;
    if (st == RC_OK)
        st = rc_calloc((void **)&only, orig.n_seq, sizeof *only, "trace");
    if (st == RC_OK) { /* the traced sequences' decode batches and forward groups */
        for (int64_t k = 0; k < n_sel; k++)
            only[seqs[k]] = true;
        x.cfg.replay_only = only;
        x.cfg.capture = rc_trace_capture;
        x.cfg.capture_ctx = tr;
        st = run_compute(&x);
    }
    const double seconds = mono_now() - t0;
    const rc_trace_table *tt = NULL;
    if (st == RC_OK)
        st = rc_trace_compare(tr, &tt);
    if (st == RC_OK)
        st = rc_calloc((void **)&lp, 2 * n_sel * L, sizeof *lp, "trace");
    rc_trace_out tout = {0};
    if (st == RC_OK) { /* the traced sequences' replayed log-probs, against the file's */
        side_str(&ro->sampler, false, sd_s, sizeof sd_s);
        side_str(&ro->trainer, true, sd_t, sizeof sd_t);
        tout = (rc_trace_out){tt, sd_s, sd_t, L, x.m->cfg.n_layers, lp, lp + n_sel * L, 0, 0, 0};
        const rc_len_result *fl = &orig.lens[orig.n_lens - 1];
        for (int64_t k = 0; k < n_sel; k++) {
            const int64_t q = seqs[k], valid = orig.gen_valid[q] < L ? orig.gen_valid[q] : L;
            for (int64_t t = 0; t < L; t++) {
                const float g = t < valid ? x.res.logprob_gen[q * x.res.gen_len + t] : NAN;
                const float fw = t < valid ? x.res.lens[0].logprob_fwd[q * L + t] : NAN;
                lp[k * L + t] = g;
                lp[(n_sel + k) * L + t] = fw;
                if (t >= valid)
                    continue;
                const float og = orig.logprob_gen[q * orig.gen_len + t], of = fl->logprob_fwd[q * L + t];
                tout.replay_tokens++;
                tout.replay_equal_gen += memcmp(&g, &og, sizeof g) == 0;
                tout.replay_equal_fwd += memcmp(&fw, &of, sizeof fw) == 0;
            }
        }
        orig.trace = &tout;
        if (out_path)
            st = rc_h5_write(&orig, out_path, to.force);
        orig.trace = NULL;
    }
    if (st == RC_OK) {
        if (to.json)
            print_trace_json(&tout, to.in, out_path, seconds);
        else
            print_trace_table(&tout, to.in, out_path, to.seq_list ? 0 : 1, seconds);
    }
    code = st == RC_OK ? 0 : fail(st);
    free(lp);
    free(only);
    rc_trace_free(tr);
    rc_results_free(&orig);
    run_free(&x);
    return code;
}

static char *join_args(int argc, char **argv)
{
    size_t n = 1;
    for (int i = 0; i < argc; i++)
        n += 4 * strlen(argv[i]) + 3;
    char *s = malloc(n), *p = s;
    if (!s)
        return NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool plain = *a != '\0';
        for (const char *c = a; *c; c++)
            if (!(isalnum((unsigned char)*c) || strchr("-_./=,:+%@", *c)))
                plain = false;
        if (i)
            *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (const char *c = a; *c; c++) {
            if (*c == '\'') {
                memcpy(p, "'\\''", 4);
                p += 4;
            } else {
                *p++ = *c;
            }
        }
        *p++ = '\'';
    }
    *p = '\0';
    return s;
}

/* stdin, stdout, stderr closed by the caller: hold them open on /dev/null,
 * read-only, so that no file this process opens becomes "stdout" and every
 * write to them fails (and is reported) instead. */
static void hold_std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
            int r = open("/dev/null", O_RDONLY);
            if (r >= 0 && r != fd) /* lower ones are open, so r == fd */
                close(r);
        }
}

/* Results printed to stdout must arrive: a full disk, a closed stdout or a
 * write error is exit 6 with one line (the result file, if any, stays). */
static int finish_stdout(int code)
{
    errno = 0;
    bool bad = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    if (fclose(stdout) != 0 && !bad) {
        bad = true;
        e = errno;
    }
    if (!bad)
        return code;
    if (e == EBADF)
        fputs("ratiocheck: cannot write to standard output: it is closed\n", stderr);
    else
        fprintf(stderr, "ratiocheck: cannot write to standard output: %s\n", e ? strerror(e) : "write error");
    return code == 0 || code == rc_exit_code(RC_ERR_GATE) ? rc_exit_code(RC_ERR_IO) : code;
}

int main(int argc, char **argv)
{
    hold_std_fds();
    /* signals first: nothing may arrive to a default action, even while the
     * model loads; a caller's blocked mask must not hide them */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGXFSZ, SIG_IGN); /* a file size limit: write() fails with EFBIG, reported as such */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    char *cmdline = join_args(argc, argv);
    if (!cmdline)
        return fail(rc_errorf(RC_ERR_NOMEM, "out of memory"));
    int code;
    if (argc < 2 || argv[1][0] == '-' ) {
        const char *a = argc >= 2 ? argv[1] : "";
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            code = (fputs(k_usage, stdout), 0);
        else if (!strcmp(a, "-V") || !strcmp(a, "--version"))
            code = (printf("ratiocheck %s\n", RC_VERSION), 0);
        else
            code = cmd_run(argc, argv, cmdline);
    } else if (!strcmp(argv[1], "run")) {
        code = cmd_run(argc - 1, argv + 1, cmdline);
    } else if (!strcmp(argv[1], "score")) {
        code = cmd_score(argc - 1, argv + 1, cmdline);
    } else if (!strcmp(argv[1], "sweep")) {
        code = cmd_sweep(argc - 1, argv + 1, cmdline);
    } else if (!strcmp(argv[1], "help")) {
        code = (fputs(k_usage, stdout), 0);
    } else if (!strcmp(argv[1], "report")) {
        code = cmd_report(argc - 1, argv + 1);
    } else if (!strcmp(argv[1], "diff")) {
        code = cmd_diff(argc - 1, argv + 1);
    } else if (!strcmp(argv[1], "trace")) {
        code = cmd_trace(argc - 1, argv + 1);
    } else if (!strcmp(argv[1], "tokenize")) {
        code = cmd_tokenize(argc - 1, argv + 1);
    } else if (!strcmp(argv[1], "inspect")) {
        code = cmd_inspect(argc - 1, argv + 1);
    } else {
        code = usage_error("unknown command '%s'", argv[1]);
    }
    free(cmdline);
    return finish_stdout(code);
}
