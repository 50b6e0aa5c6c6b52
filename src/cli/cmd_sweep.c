/* ratiocheck sweep: one setting changed at a time over the same rollouts. */
#include "cli.h"

/* ------------------------------------------------------------------------ */
/* ratiocheck sweep                                                          */


/* "sampler:SPEC", "trainer:SPEC" or "both:SPEC" (--vary) */
rc_status parse_vary(const char *v, sweep_setting *out)
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
rc_status sweep_sides(const run_opts *ro, const sweep_setting *set, rc_side *sm, rc_side *tr)
{
    *sm = ro->sampler;
    *tr = ro->trainer;
    if (set->sides & 1)
        RC_TRY(rc_side_parse("--vary sampler", set->spec, false, sm));
    if (set->sides & 2)
        RC_TRY(rc_side_parse("--vary trainer", set->spec, true, tr));
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
int default_settings(const run_ctx *x, sweep_setting *t)
{
    const rc_side *sm = &x->ro.sampler, *tr = &x->ro.trainer;
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
static rc_status sweep_replay(run_ctx *x, const rc_side *sm, const rc_side *tr, rc_results *out)
{
    rc_rollout_cfg cfg = x->cfg;
    rc_side_apply(sm, tr, x->ro.temperature, &cfg);
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
rc_status sweep_run(run_ctx *x, const sweep_setting *set, int n_set)
{
    RC_TRY(rc_calloc((void **)&x->res.sweep, n_set + 1, sizeof *x->res.sweep, "sweep rows"));
    for (int i = 0; i <= n_set; i++) {
        rc_sweep_row *row = &x->res.sweep[i];
        x->res.n_sweep = i + 1;
        rc_side sm = x->ro.sampler, tr = x->ro.trainer;
        if (i == 0) {
            snprintf(row->name, sizeof row->name, "base again (noise floor)");
            row->noise_floor = true;
        } else {
            snprintf(row->name, sizeof row->name, "%s", set[i - 1].name);
            RC_TRY(sweep_sides(&x->ro, &set[i - 1], &sm, &tr)); /* parsed once before: cannot fail */
        }
        rc_side_str(&sm, false, row->sampler, sizeof row->sampler);
        rc_side_str(&tr, true, row->trainer, sizeof row->trainer);
        row->invariant = sm.kernels == RC_KERNELS_INVARIANT && tr.kernels == RC_KERNELS_INVARIANT &&
                         !(x->ro.sampler.kernels == RC_KERNELS_INVARIANT && x->ro.trainer.kernels == RC_KERNELS_INVARIANT);
        rc_status st = rc_side_check("sampler", &sm);
        if (st == RC_OK)
            st = rc_side_check("trainer", &tr);
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

int cmd_sweep(int argc, char **argv, const char *cmdline)
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
        rc_side sm, tr;
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
