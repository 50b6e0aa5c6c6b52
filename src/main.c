/* ratiocheck command line. The only place that calls exit(). */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "rc_build_config.h"
#include "status.h"
#include "util.h"

static const char *k_usage =
    "Usage: ratiocheck COMMAND [OPTIONS]\n"
    "\n"
    "Checks whether the log-probs a sampler records during KV-cached generation\n"
    "agree with the log-probs a trainer recomputes in one batched forward pass.\n"
    "\n"
    "Commands:\n"
    "  inspect --model DIR [--json]   describe a Hugging Face model folder\n"
    "\n"
    "Options:\n"
    "  -h, --help      show this help\n"
    "  -V, --version   show the version\n"
    "\n"
    "Exit codes: 0 ok, 1 internal error, 2 usage error, 3 threshold exceeded,\n"
    "4 malformed input file, 5 unsupported model or feature, 6 I/O error,\n"
    "7 out of memory, 8 device error, 130 interrupted.\n";

static int fail(rc_status st)
{
    fprintf(stderr, "ratiocheck: %s\n", rc_last_error());
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
    }
    return "?";
}

static int cmd_inspect(int argc, char **argv)
{
    const char *model = NULL;
    int json = 0;
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":m:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'j': json = 1; break;
        case 'h': fputs("Usage: ratiocheck inspect --model DIR [--json]\n", stdout); return 0;
        case ':': return usage_error("option %s needs a value", argv[optind - 1]);
        default: return usage_error("unknown option %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!model)
        return usage_error("%s: --model DIR is required", "inspect");
    rc_model *m;
    rc_status st = rc_model_load(model, &m);
    if (st != RC_OK)
        return fail(st);
    const rc_config *k = &m->cfg;
    char pc[32];
    if (json) {
        printf("{\"model\": \"%s\", \"model_type\": \"%s\", \"family\": \"%s\", \"layers\": %lld, "
               "\"hidden\": %lld, \"heads\": %lld, \"kv_heads\": %lld, \"head_dim\": %lld, "
               "\"intermediate\": %lld, \"vocab\": %lld, \"max_positions\": %lld, "
               "\"parameters\": %lld, \"stored_dtype\": \"%s\"}\n",
               model, k->model_type, k->arch->family, (long long)k->n_layers, (long long)k->hidden,
               (long long)k->n_heads, (long long)k->n_kv_heads, (long long)k->head_dim,
               (long long)k->intermediate, (long long)k->vocab, (long long)k->max_pos,
               (long long)m->n_params, m->stored_dtype);
    } else {
        printf("model          %s\n", model);
        printf("architecture   %s (family %s)\n", k->model_type, k->arch->family);
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
        printf("rope           %s, theta %g, rotary dims %lld of %lld\n", rope_name(k->rope_type),
               k->rope_theta, (long long)k->rotary_dim, (long long)k->head_dim);
        printf("tied embedding %s\n", k->tie_embeddings ? "yes" : "no");
        printf("parameters     %s (%lld)\n", rc_fmt_count(pc, sizeof pc, m->n_params), (long long)m->n_params);
        printf("stored dtype   %s\n", m->stored_dtype);
    }
    rc_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(k_usage, stderr);
        return rc_exit_code(RC_ERR_USAGE);
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(k_usage, stdout);
        return 0;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("ratiocheck %s\n", RC_VERSION);
        return 0;
    }
    if (strcmp(cmd, "inspect") == 0)
        return cmd_inspect(argc - 1, argv + 1);
    if (cmd[0] == '-')
        return usage_error("unknown option %s", cmd);
    return usage_error("unknown command '%s'", cmd);
}
