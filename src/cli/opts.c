/* Options: the parser and --help made from a table, the number and list
 * parsers, and the run options' table. */
#include "cli.h"


rc_status op_path(const opt_spec *o, const char *v, void *dst)
{
    if (!v[0])
        return rc_errorf(RC_ERR_USAGE, "--%s: the path is empty%s", o->name,
                         strcmp(o->name, "out") ? "" : " (--out none writes no file)");
    *OPT_AT(o, dst, const char *) = v;
    return RC_OK;
}

rc_status op_flag(const opt_spec *o, const char *v, void *dst)
{
    (void)v;
    *OPT_AT(o, dst, bool) = true;
    return RC_OK;
}

rc_status op_i64(const opt_spec *o, const char *v, void *dst)
{
    char name[64];
    snprintf(name, sizeof name, "--%s", o->name);
    /* hi = 0x1p63 stands for INT64_MAX, which a double cannot hold */
    return rc_parse_i64(name, v, (int64_t)o->lo, o->hi >= 0x1p63 ? INT64_MAX : (int64_t)o->hi, OPT_AT(o, dst, int64_t));
}

/* --by prob|entropy|prob,entropy: a bit per strata kind (results.h RC_STRATA_*) */
rc_status op_by(const opt_spec *o, const char *v, void *dst)
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

rc_status op_f64(const opt_spec *o, const char *v, void *dst)
{
    char name[64];
    snprintf(name, sizeof name, "--%s", o->name);
    return rc_parse_f64(name, v, o->lo, o->hi, OPT_AT(o, dst, double));
}


static bool opt_applies(const opt_spec *o, const opt_cmd *cmd)
{
    return !cmd || !cmd->bit || !o->cmds || (o->cmds & cmd->bit);
}

/* A command's --help: its usage text, then the table's options that apply
 * to it (the help text from column 25, on the next line when the name is
 * longer, continuation lines indented to it; a section's title before its
 * first option that applies; "%s" in a help text: the command's default
 * output name). */
void print_opts_usage(FILE *f, const opt_cmd *cmd, const opt_spec *t, size_t n)
{
    fputs(cmd->usage, f);
    const char *section = NULL;
    for (size_t i = 0; i < n; i++) {
        const opt_spec *o = &t[i];
        if (o->section)
            section = o->section;
        if (!opt_applies(o, cmd))
            continue;
        if (section)
            fprintf(f, "%s\n", section);
        section = NULL;
        char head[96], help[2048];
        int w = o->short_name ? snprintf(head, sizeof head, "  -%c, --%s", o->short_name, o->name)
                              : snprintf(head, sizeof head, "  --%s", o->name);
        if (o->metavar)
            w += snprintf(head + w, sizeof head - (size_t)w, " %s", o->metavar);
        fprintf(f, "%s%*s", head, w < 25 ? 25 - w : 0, "");
        if (w >= 25)
            fprintf(f, "\n%25s", "");
        const char *at = strstr(o->help, "%s"), *gm = strstr(o->help, "%M");
        if (gm) { /* --fail-above's metrics from the statistics' table, wrapped under the column */
            char names[512];
            rc_gate_names(names, sizeof names);
            int k = snprintf(help, sizeof help, "%.*s", (int)(gm - o->help), o->help), line = 1;
            for (const char *p = names; *p && k < (int)sizeof help - 2; p++) {
                if (*p == ' ' && line > 44 && strchr(p + 1, ' ') != p + 1) {
                    help[k++] = '\n';
                    line = 0;
                    continue;
                }
                help[k++] = *p;
                line++;
            }
            snprintf(help + k, sizeof help - (size_t)k, "%s", gm + 2);
        } else if (at)
            snprintf(help, sizeof help, "%.*s%s%s", (int)(at - o->help), o->help, cmd->out_kind ? cmd->out_kind : "",
                     at + 2);
        else
            snprintf(help, sizeof help, "%s", o->help);
        for (const char *h = help;;) {
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

#define MAX_OPTS 96

int parse_opts_cmd(int argc, char **argv, const opt_spec *t, size_t n, void *dst, size_t help_off,
                   const opt_cmd *cmd)
{
    struct option lopts[MAX_OPTS + 1];
    char shorts[2 * MAX_OPTS + 2] = ":";
    size_t ns = 1, nl = 0;
    if (n > MAX_OPTS)
        return fail(rc_errorf(RC_ERR_INTERNAL, "option table of %zu entries", n));
    for (size_t i = 0; i < n; i++) {
        const opt_spec *o = &t[i];
        if (!opt_applies(o, cmd) && !(o->refused & cmd->bit))
            continue; /* getopt calls it unknown */
        lopts[nl++] = (struct option){o->name, o->metavar ? required_argument : no_argument, NULL, (int)(256 + i)};
        if (o->short_name && opt_applies(o, cmd)) {
            shorts[ns++] = (char)o->short_name;
            if (o->metavar)
                shorts[ns++] = ':';
        }
    }
    shorts[ns] = '\0';
    lopts[nl] = (struct option){0, 0, 0, 0};
    bool *help = (bool *)(void *)((char *)dst + help_off);
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, shorts, lopts, NULL)) != -1) {
        const int k = c == ':' ? optopt : c; /* a missing value: the option's own code */
        const opt_spec *o = NULL;
        if (k >= 256 && k < 256 + (int)n)
            o = &t[k - 256];
        for (size_t i = 0; !o && k > 0 && k < 256 && i < n; i++)
            if (t[i].short_name == k && opt_applies(&t[i], cmd))
                o = &t[i];
        if (o && !opt_applies(o, cmd))
            return usage_error("%s: --%s does not apply%s", cmd->name, o->name, cmd->refused_why);
        if (c == ':')
            return o && o->metavar ? usage_error("option %s needs a value (--%s needs %s)", argv[optind - 1],
                                                 o->name, o->metavar)
                                   : usage_error("option %s needs a value", argv[optind - 1]);
        if (!o)
            return usage_error("unknown option %s", argv[optind - 1]);
        rc_status st = o->parse(o, o->metavar ? optarg : NULL, dst);
        if (st == RC_OK && o->given)
            *(bool *)(void *)((char *)dst + o->given) = true;
        if (st != RC_OK)
            return fail(st);
        if (*help) {
            print_opts_usage(stdout, cmd, t, n);
            return 0;
        }
    }
    return -1;
}

int parse_opts(int argc, char **argv, const opt_spec *t, size_t n, void *dst, size_t help_off, const char *usage)
{
    const opt_cmd cmd = {NULL, 0, usage, NULL, NULL};
    return parse_opts_cmd(argc, argv, t, n, dst, help_off, &cmd);
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
rc_status parse_lens(const char *v, rc_rollout_cfg *cfg)
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

static rc_status op_dtype(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    return rc_dtype_parse_cli(v, &ro->cfg.num.dt);
}

static rc_status op_kernels(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    return rc_side_parse_kernels("--kernels", v, &ro->kernels);
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
    return rc_side_parse_lpdt("--logprob-dtype", v, &ro->lp_same);
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

rc_status parse_layer_split(const char *v, int64_t *out, int *n)
{
    *n = 0;
    for (const char *p = v;;) {
        if (*n == RC_MAX_DEVICES)
            return rc_errorf(RC_ERR_USAGE, "--layer-split: more than %d GPUs in '%s'", RC_MAX_DEVICES, v);
        char *end;
        errno = 0;
        const long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 1 || x > 1 << 20 || (*end != ',' && *end != '\0'))
            return rc_errorf(RC_ERR_USAGE, "--layer-split: '%s' is not a list of layer counts >= 1, one per GPU "
                             "(e.g. --layer-split 15,17)", v);
        out[(*n)++] = x;
        if (!*end)
            return RC_OK;
        p = end + 1;
    }
}

rc_status check_gpus(int64_t *gpus, int n_split)
{
    if (n_split > 0 && *gpus == 0)
        *gpus = n_split;
    if (n_split > 0 && n_split != *gpus)
        return rc_errorf(RC_ERR_USAGE, "--layer-split gives %d GPUs' layers, --gpus %lld: one count per GPU", n_split,
                         (long long)*gpus);
    return RC_OK;
}

static rc_status op_layer_split(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    return parse_layer_split(v, ro->layer_split, &ro->n_split);
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
    return rc_gates_parse(v, ro->gates, &ro->n_gates);
}

static rc_status op_fail_on(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    return rc_gates_parse_fail_on(v, &ro->fail_on);
}

static rc_status op_vary(const opt_spec *o, const char *v, void *dst)
{
    run_opts *ro = dst;
    (void)o;
    if (ro->n_vary >= MAX_SWEEP)
        return rc_errorf(RC_ERR_USAGE, "--vary: at most %d settings", MAX_SWEEP);
    ro->vary[ro->n_vary++] = v;
    return RC_OK;
}

static rc_status op_lp_kind(const opt_spec *o, const char *v, void *dst)
{
    if (strcmp(v, "raw") && strcmp(v, "processed"))
        return rc_errorf(RC_ERR_USAGE, "--logprobs-kind: '%s' is not raw or processed", v);
    return op_path(o, v, dst);
}

#define RUN_SWEEP (CMD_RUN | CMD_SWEEP)
#define CMD_ALL_RUNS (CMD_RUN | CMD_SWEEP | CMD_SCORE)
#define RO(field) offsetof(run_opts, field)
static const opt_spec k_run_opts[] = {
    /* score's own options, and the run options' rows whose help differs for it */
    {"rollouts", 0, "FILE", "the logged rollouts (required)", "Logged rollouts:", op_path, RO(rollouts), 0, 0,
     CMD_SCORE, 0, 0},
    {"format", 0, "F", "auto (default: sniffed), jsonl, vllm, sglang, h5", NULL, op_path, RO(format), 0, 0, CMD_SCORE,
     0, 0},
    {"logprobs-kind", 0, "K", "raw (default: the full distribution at temperature 1,\nvLLM raw_logprobs) or "
     "processed (after temperature and\ntop-k / top-p); a file's \"logprobs_kind\" wins", NULL, op_lp_kind,
     RO(logprobs_kind), 0, 0, CMD_SCORE, 0, 0},
    {"check-only", 0, NULL, "read and check the file against the model (ids, counts,\npositions, log-prob values), "
     "print what it holds, and\nstop before the forward pass (no output file)", NULL, op_flag, RO(check_only), 0, 0,
     CMD_SCORE, 0, 0},
    {"sweep", 0, NULL, "also replay the trainer with one setting changed at a\ntime (the trainer-side defaults of "
     "ratiocheck sweep)", NULL, op_flag, RO(sweep), 0, 0, CMD_SCORE, 0, 0},
    {"vary", 0, "trainer:SPEC", "a setting of that sweep (repeatable; replaces the defaults)", NULL, op_vary, 0, 0, 0,
     CMD_SCORE, 0, 0},
    {"chunk-rollouts", 0, "N", "score a large file in chunks of at most N rollouts\n(default 4096, fewer when they "
     "would pad to more than\n4M cells; a multiple of --forward-batch when larger):\nmemory stays bounded, the "
     "statistics are the same (the\nquantiles and strata exact up to 4M tokens, README);\na file of more than one "
     "chunk takes no --show,\n--show-worst; --sweep scores every rollout at once", NULL, op_i64, RO(chunk_rollouts), 1,
     RC_ROLLOUT_MAX_COUNT, CMD_SCORE, 0, 0},
    {"len", 0, "LIST", "lengths to re-score, as run's --len (default: the longest\nresponse)", "Re-scoring:",
     op_len, 0, 0, 0, CMD_SCORE, 0, 0},
    {"forward-batch", 0, "N", "sequences per full forward (default 64)", NULL, op_i64, RO(cfg.forward_batch), 1,
     1 << 20, CMD_SCORE, 0, RO(forward_batch_given)},
    /* sweep's own */
    {"vary", 0, "SIDE:SPEC", "a setting of its own instead of the default list: SPEC as\nin --sampler / --trainer, "
     "applied to SIDE = sampler,\ntrainer or both; repeat for more rows, e.g.\n--vary trainer:lm-head=fp32 --vary "
     "both:dtype=fp16", "Sweep:", op_vary, 0, 0, 0, CMD_SWEEP, 0, 0},
    {"model", 'm', "DIR", "Hugging Face model folder (default: the bundled model)", "Model and numerics:", op_path,
     RO(model_dir), 0, 0, 0, 0, 0},
    {"layers", 0, "N", "run only the first N decoder layers, then the final\nnorm and the head (default all)", NULL,
     op_i64, RO(layers), 1, 4096, 0, 0, 0},
    {"dtype", 0, "fp32|fp16|bf16", "dtype both paths compute in (default bf16)", NULL, op_dtype, 0, 0, 0, 0, 0, 0},
    {"kernels", 0, "engine|invariant|blas", "reduction order (default engine)", NULL, op_kernels, 0, 0, 0, 0, 0, 0},
    {"upcast", 0, "LIST", "ops kept in fp32: softmax,rope,norm,lm_head, or all (default none)", NULL, op_upcast, 0,
     0, 0, 0, 0, 0},
    {"alibi-bias", 0, "model|rowmax",
     "ALiBi models: the bias as the family's code builds it\n(default model), or minus its row max: slope x (key -\n"
     "query) <= 0, the seed report's fix and what FlashAttention\nand vLLM compute (no effect on other models)",
     NULL, op_alibi_bias, 0, 0, 0, 0, 0, 0},
    {"logprob-dtype", 0, "fp32|same", "log-softmax in fp32 (default) or in the model dtype", NULL, op_lpdt, 0, 0, 0, 0, 0, 0},
    {"reference", 0, "fp32|fp64|none",
     "also re-score in fp32 (invariant kernels) or in\nfloat64, to report each path's own error (default none)", NULL,
     op_reference, 0, 0, 0, 0, 0, 0},
    {"threads", 0, "N", "CPU threads (default: all cores)", NULL, op_i64, RO(threads), 1, 1024, 0, 0, 0},
    {"backend", 0, "cpu|cuda|auto",
     "where to compute (default auto: cuda when this build\nhas it and a GPU answers, else cpu); cuda never falls\n"
     "back: without a usable GPU it exits 8 with the reason",
     NULL, op_backend, 0, 0, 0, 0, 0, 0},
    {"gpus", 0, "N",
     "split the model's layers over N GPUs (--backend cuda):\neach GPU holds a contiguous range of layers with\n"
     "their KV cache, the activations move between GPUs,\nthe results are bitwise one GPU's. Default: one GPU\n"
     "when the run's memory estimate (inspect --gpus N)\nfits GPU 0's free memory, else the fewest GPUs whose\n"
     "split fits (said on stderr; none fits: exit 7);\n--gpus 1 forces one GPU (exit 7 if it does not fit)",
     NULL, op_i64, RO(gpus), 1, RC_MAX_DEVICES, 0, 0, 0},
    {"layer-split", 0, "LIST",
     "layers per GPU with --gpus, e.g. 15,17 (default: even\nby weight bytes; GPU 0 also holds the embedding and\n"
     "the LM head)",
     NULL, op_layer_split, 0, 0, 0, 0, 0, 0},
    {"prompts", 0, "FILE",
     ".txt (one prompt per line, \\n escapes), .jsonl\n({\"prompt\": ..}, {\"tokens\": [..]} or\n"
     "{\"messages\": [{\"role\": .., \"content\": ..}]}, rendered\nwith the model's chat template (docs/chat-templates.md))\n"
     "or .ids (token ids) (default: the bundled prompts)",
     "Rollouts:", op_path, RO(prompts_path), 0, 0, RUN_SWEEP, CMD_SCORE, 0},
    {"chat-template-kwargs", 0, "JSON",
     "extra chat-template arguments for every {\"messages\"}\nprompt, as apply_chat_template(..., **kwargs), e.g.\n"
     "'{\"enable_thinking\": false}' (a line's own\n\"chat_template_kwargs\" wins key by key)",
     NULL, op_path, RO(chat_kwargs), 0, 0, RUN_SWEEP, CMD_SCORE, 0},
    {"num-prompts", 0, "N", "use the first N prompts (default all)", NULL, op_i64, RO(num_prompts), 1, 1 << 24, RUN_SWEEP, CMD_SCORE, 0},
    {"samples", 0, "N", "samples per prompt (default 2)", NULL, op_i64, RO(cfg.samples), 1, 1 << 20, RUN_SWEEP, CMD_SCORE, 0},
    {"len", 0, "LIST", "generated lengths to re-score, e.g. 20,40,50, or ranges:\n64:4096:x2 (64, 128, ..., 4096), 10:50:+10 (default\n20,40,50; with --rollouts-from: the file's)", NULL, op_len, 0, 0, 0, RUN_SWEEP, 0, 0},
    {"batch", 0, "N", "sequences decoded together (default 32)", NULL, op_i64, RO(cfg.batch), 1, 1 << 20, RUN_SWEEP, CMD_SCORE, 0},
    {"forward-batch", 0, "N", "sequences per full forward (default: all)", NULL, op_i64, RO(cfg.forward_batch), 1,
     1 << 20, RUN_SWEEP, 0, 0},
    {"seed", 0, "N", "sampling seed (default 0)", NULL, op_i64, RO(seed), 0, 0x1p63, RUN_SWEEP, CMD_SCORE, 0},
    {"temperature", 0, "T", "sampling temperature (default 1.0)", NULL, op_f64, RO(temperature), 1e-3, 1e3, CMD_ALL_RUNS, 0, RO(temperature_given)},
    {"top-k", 0, "K", "top-k sampling, 0 = off (default 0)", NULL, op_i64, RO(cfg.sampling.top_k), 0, 1 << 24, CMD_ALL_RUNS, 0, RO(top_k_given)},
    {"top-p", 0, "P", "top-p sampling, 1.0 = off (default 1.0)", NULL, op_f64, RO(cfg.sampling.top_p), 1e-6, 1.0, CMD_ALL_RUNS, 0, RO(top_p_given)},
    {"stop-at-eos", 0, NULL, "stop a sequence at EOS (default: EOS ignored)", NULL, op_flag, RO(cfg.stop_at_eos), 0,
     0, RUN_SWEEP, CMD_SCORE, 0},
    {"rollouts-from", 0, "F.h5",
     "replay the prompts and generated tokens of an earlier run\ninstead of sampling (so `ratiocheck diff` can compare runs)",
     NULL, op_path, RO(replay), 0, 0, RUN_SWEEP, CMD_SCORE, 0},
    {"sampler", 0, "SPEC", "the sampler's side (cached generation): KEY=VALUE,... of\ndtype, kernels, upcast "
     "(ops joined with +), lm-head=fp32|dtype,\nlogprob-dtype, mode=pure|autocast (autocast: fp32 master\nweights under torch.autocast), residual=fp32|dtype\n(Megatron's --fp32-residual-connection), batch,\nprefill-chunk,\nkv-cache=auto|fp8_e4m3|fp8_e5m2 (vLLM's fp8 KV cache),\nkv-scale=S (its k/v scale, default 1), tp=N (tensor\nparallel), tp-reduce=fp32|ring|chain|seq (default fp32:\nvLLM's custom all-reduce), weights=dtype|fp8|as-stored (fp8\ne4m3 linear layers, as an fp8 rollout engine; as-stored:\nan FP8 block checkpoint's own weights and scales) with\nweight-scale=tensor|channel|block and\nact=dynamic-token|dynamic-tensor|none (W8A16) (default:\nthe options above; fp8: tensor, dynamic-token); MoE models:\nrouter=fp32|dtype (the router's logits and weights,\ndefault dtype; DeepSeek-V3: default fp32 as transformers,\ndtype: its gate as vLLM's default); hybrid models:\nstate=fp32|dtype (the linear layers' recurrent state),\nchunk=N (their chunked form, default 64),\nprefix-cache=on|off (the prompt's state restored from a\ncopy in the dtype)", "Two sides:",
     op_path, RO(sampler_spec), 0, 0, RUN_SWEEP, CMD_SCORE, 0},
    {"trainer", 0, "SPEC", "the trainer's side (full forward), the same keys with\nmicro-batch instead of batch (prefill-chunk: the forward\nin calls of N tokens through a KV cache; tp: Megatron's,\nbias after the reduce, default tp-reduce=ring: NCCL;\nkv-cache is the sampler's; MoE models: routing=replay,\nR3's replay of the sampler's experts; hybrid models:\nstate, chunk; prefix-cache is the sampler's), e.g. "
     "dtype=bf16,lm-head=fp32", NULL, op_path, RO(trainer_spec), 0, 0, 0, 0, 0},
    {"distribution", 0, NULL, "also compare the two sides' whole next-token\ndistributions at every position: KL(sampler ||\n"
     "trainer), total variation, top-1 agreement (replays\nthe sampler: about twice the run's time)", "Statistics:",
     op_flag, RO(cfg.distribution), 0, 0, RUN_SWEEP, CMD_SCORE, 0},
    {"clip-eps", 0, "E", "PPO clip range [1 - E, 1 + E] of the clip fraction\n(default 0.2)", NULL, op_f64,
     RO(clip_eps), 1e-9, 10.0, 0, 0, 0},
    {"clip-eps-low", 0, "E", "its lower side alone, e.g. DAPO's 0.2 (default --clip-eps)", NULL, op_f64,
     RO(cfg.stat.clip_eps_low), 1e-9, 1.0, 0, 0, 0},
    {"clip-eps-high", 0, "E", "its upper side alone, e.g. DAPO's 0.28 (default --clip-eps)", NULL, op_f64,
     RO(cfg.stat.clip_eps_high), 1e-9, 10.0, 0, 0, 0},
    {"seq-eps", 0, "E", "GSPO band: a sequence is outside when its geometric-mean\nratio exp(mean log r) leaves "
     "[1 - E, 1 + E] (default 3e-4)", NULL, op_f64, RO(cfg.stat.seq_eps), 1e-12, 10.0, 0, 0, 0},
    {"seq-cap", 0, "C", "sequence-level IS cap: a sequence is above it when\nexp(sum log r) > C (default 3)", NULL,
     op_f64, RO(cfg.stat.seq_cap), 1.0, 1e30, 0, 0, 0},
    {"out", 0, "FILE.h5", "HDF5 results (default MODEL.DTYPE.%s.h5); --out none: no file", "Output:", op_path,
     RO(out_path), 0, 0, 0, 0, 0},
    {"force", 0, NULL, "overwrite an existing output file", NULL, op_flag, RO(force), 0, 0, 0, 0, 0},
    {"json", 0, NULL, "print one JSON object instead of the table", NULL, op_flag, RO(json), 0, 0, 0, 0, 0},
    {"by", 0, "prob|entropy|prob,entropy",
     "also print log r by decile of the sampler's token\nprobability and/or entropy at the longest length\n(JSON and "
     "HDF5 always have them, for every length)",
     NULL, op_by, RO(by), 0, 0, 0, 0, 0},
    {"fail-above", 0, "M=V,...",
     "exit 3 if a metric exceeds its limit at any length\n(%M,\nor any number --json prints per length; verdict:\n0 OK, 1 WARN, 2 FAIL)",
     NULL, op_gates, 0, 0, 0, 0, 0, 0},
    {"fail-on", 0, "warn|fail", "exit 3 if any verdict line is at this level or worse", NULL, op_fail_on, 0, 0, 0, 0,
     0, 0},
    {"show", 0, "N", "print the first N completions with their per-token ratios\n(with --json: \"completions\")",
     NULL, op_i64, RO(show), 0, 1 << 20, 0, 0, 0},
    {"show-worst", 0, "N", "the same for the N sequences with the largest |S|\n(sum of log r at the longest length)",
     NULL, op_i64, RO(show_worst), 0, 1 << 20, 0, 0, 0},
    {"quiet", 'q', NULL, "no progress bar", NULL, op_flag, RO(quiet), 0, 0, 0, 0, 0},
    {"help", 'h', NULL, "show this help", NULL, op_flag, RO(help), 0, 0, 0, 0, 0},
};
#undef RO
#define N_RUN_OPTS (sizeof k_run_opts / sizeof k_run_opts[0])


/* Parse the run command's options into ro (defaults first). Returns an exit
 * code when the command is done (--help, a usage error), else -1. */
const opt_cmd k_cmd_run = {"run", CMD_RUN,
                             "Usage: ratiocheck [run] [OPTIONS]\n"
                             "\n"
                             "Samples rollouts with KV-cached decoding, re-scores them with one batched\n"
                             "full forward pass per length, and reports the PPO ratio exp(new - old).\n"
                             "\n",
                             "ratiocheck", ""};
const opt_cmd k_cmd_sweep = {
    "sweep", CMD_SWEEP,
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
    "Default list (without --vary): both dtype=fp16 (bf16 when the base is fp16),\n"
    "trainer and both lm-head=fp32, both upcast=softmax / norm / rope, trainer\n"
    "mode=autocast, both kernels=invariant, sampler and trainer prefill-chunk (half\n"
    "the longest prompt), sampler tp=2 / 4 / 8, both tp=2, sampler\n"
    "kv-cache=fp8_e4m3, sampler batch=1, trainer micro-batch=1, sampler\n"
    "weights=fp8 (and weights=as-stored on an FP8 checkpoint); MoE models: both\n"
    "router=fp32 (DeepSeek-V3: sampler router=dtype), trainer routing=replay. A\n"
    "setting the model or backend cannot run is listed as skipped with the reason.\n"
    "Every option of the run command applies to the base.\n"
    "\n",
    "sweep", ""};
const opt_cmd k_cmd_score = {
    "score", CMD_SCORE,
    "Usage: ratiocheck score --rollouts FILE [--format F] [RUN OPTIONS]\n"
    "\n"
    "Re-scores rollouts your own engine logged: its log-probs are the sampler's\n"
    "side (\"old\"), ratiocheck computes the trainer's full forward (--trainer,\n"
    "--dtype ...) and the reference, and reports the same statistics, verdict,\n"
    "HDF5 file and gates as a run (README \"Check your own engine\").\n"
    "--temperature, --top-k and --top-p are the sampler's settings when the file\n"
    "does not state them (a file that states others: exit 2).\n"
    "\n",
    "score", ": the rollouts come from --rollouts FILE"};

int parse_run_args(int argc, char **argv, run_opts *ro, const opt_cmd *cmd)
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

    int code = parse_opts_cmd(argc, argv, k_run_opts, N_RUN_OPTS, ro, offsetof(run_opts, help), cmd);
    if (code >= 0)
        return code;
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (ro->show > 0 && ro->show_worst > 0)
        return usage_error("--show and --show-worst cannot be combined (the first N or the worst N)");
    /* the two sides: the options above, then each side's spec */
    for (int t = 0; t < 2; t++) { /* the side keys' defaults (side.c), then the options above */
        rc_side *sd = t ? &ro->trainer : &ro->sampler;
        rc_side_defaults(t == 1, sd);
        sd->dt = ro->cfg.num.dt;
        sd->kernels = ro->kernels;
        sd->upcast = ro->cfg.num.upcast;
        sd->lp_same = ro->lp_same;
        sd->batch = t ? ro->cfg.forward_batch : ro->cfg.batch;
    }
    rc_status sst = RC_OK;
    if (ro->sampler_spec)
        sst = rc_side_parse("--sampler", ro->sampler_spec, false, &ro->sampler);
    if (sst == RC_OK && ro->trainer_spec)
        sst = rc_side_parse("--trainer", ro->trainer_spec, true, &ro->trainer);
    if (sst == RC_OK)
        sst = rc_side_check("--sampler", &ro->sampler);
    if (sst == RC_OK)
        sst = rc_side_check("--trainer", &ro->trainer);
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
    for (int g = 0; g < ro->n_gates; g++) { /* a whole-distribution metric needs its pass */
        const rc_len_field *f = rc_len_gate(ro->gates[g].metric);
        if (f && (f->where & RC_LF_DIST) && !ro->cfg.distribution)
            return usage_error("--fail-above %s needs --distribution", ro->gates[g].metric);
    }
    if (ro->cfg.distribution && ro->cfg.forward_chunk > 0)
        return usage_error("--distribution with the trainer's prefill-chunk: its forward in chunks is not covered "
                           "(docs/statistics.md \"Distribution\")");
    return -1;
}

bool eval_gates(const run_opts *ro, const rc_results *res, char *rules, size_t rn, char *failed, size_t fn,
                FILE *err)
{
    return rc_gates_eval(ro->gates, ro->n_gates, ro->fail_on, res, rules, rn, failed, fn, err);
}
