/* ratiocheck sweep: one setting changed at a time over the same rollouts. */
#include "cli.h"

rc_status parse_vary(const char *v, const run_opts *ro, sweep_setting *out)
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
    out->sampler = ro->sampler;
    out->trainer = ro->trainer;
    if (out->sides & 1)
        RC_TRY(rc_side_parse("--vary sampler", out->spec, false, &out->sampler));
    if (out->sides & 2)
        RC_TRY(rc_side_parse("--vary trainer", out->spec, true, &out->trainer));
    return RC_OK;
}

/* one field of a side changed (a default setting) */
typedef enum { SET_DTYPE, SET_LM_HEAD, SET_UPCAST, SET_MODE, SET_KERNELS, SET_PREFILL, SET_TP, SET_KV, SET_BATCH,
               SET_WEIGHTS, SET_ROUTER, SET_REPLAY, SET_MLA,
               SET_STATE, SET_CHUNK, SET_PREFIX } side_change;

static void change(rc_side *sd, side_change c, int64_t v)
{
    switch (c) {
    case SET_DTYPE: sd->dt = (rc_dtype)v; break;
    case SET_LM_HEAD: sd->upcast |= RC_UPCAST_LM_HEAD; break;
    case SET_UPCAST: sd->upcast = (unsigned)v; break; /* the whole set, as upcast= */
    case SET_MODE: sd->mode = (rc_precision)v; break;
    case SET_KERNELS: sd->kernels = (rc_kernels)v; break;
    case SET_PREFILL: sd->prefill_chunk = v; break;
    case SET_TP: sd->tp = v; break;
    case SET_KV: sd->kv_quant = (rc_kv_quant)v; break;
    case SET_BATCH: sd->batch = v; break;
    case SET_WEIGHTS: sd->wq.kind = (rc_wquant)v; break;
    case SET_ROUTER: /* 1: router=fp32; 0: router=dtype, given (DeepSeek-V3's gate as vLLM computes it) */
        sd->router_f32 = v != 0;
        sd->router_dtype = v == 0;
        break;
    case SET_REPLAY: sd->route_replay = v != 0; break;
    case SET_MLA: sd->mla_form = (int)v; break;
    case SET_STATE: sd->state_dtype = v != 0; break;
    case SET_CHUNK: sd->gdn_chunk = v; break;
    case SET_PREFIX: sd->prefix_cache = v != 0; break;
    }
}

/* the base's sides with one field changed on `sides`; named by the side key it is ("both: dtype=fp16") */
static int add_setting(sweep_setting *t, int n, const run_ctx *x, unsigned sides, const char *key, side_change c,
                       int64_t v)
{
    if (n >= MAX_SWEEP)
        return n;
    sweep_setting *s = &t[n];
    s->sides = sides;
    s->sampler = x->ro.sampler;
    s->trainer = x->ro.trainer;
    if (sides & 1)
        change(&s->sampler, c, v);
    if (sides & 2)
        change(&s->trainer, c, v);
    rc_side_key_str(key, sides & 1 ? &s->sampler : &s->trainer, s->spec, sizeof s->spec);
    snprintf(s->name, sizeof s->name, "%s: %.80s", sides == 3 ? "both" : sides == 1 ? "sampler" : "trainer", s->spec);
    return n + 1;
}

/* The default variables (README "Sweep"), each one step from the base. */
int default_settings(const run_ctx *x, sweep_setting *t)
{
    const rc_side *sm = &x->ro.sampler, *tr = &x->ro.trainer;
    int n = 0;
    n = add_setting(t, n, x, 3, "dtype", SET_DTYPE, sm->dt == RC_F16 ? RC_BF16 : RC_F16);
    if (!(tr->upcast & RC_UPCAST_LM_HEAD))
        n = add_setting(t, n, x, 2, "lm-head", SET_LM_HEAD, 0);
    if (!(sm->upcast & RC_UPCAST_LM_HEAD) || !(tr->upcast & RC_UPCAST_LM_HEAD))
        n = add_setting(t, n, x, 3, "lm-head", SET_LM_HEAD, 0);
    static const unsigned ups[] = {RC_UPCAST_SOFTMAX, RC_UPCAST_NORM, RC_UPCAST_ROPE};
    for (size_t i = 0; i < sizeof ups / sizeof ups[0]; i++)
        if (!(sm->upcast & ups[i]) || !(tr->upcast & ups[i]))
            n = add_setting(t, n, x, 3, "upcast", SET_UPCAST, ups[i]);
    if (tr->mode != RC_PREC_AUTOCAST)
        n = add_setting(t, n, x, 2, "mode", SET_MODE, RC_PREC_AUTOCAST);
    if (sm->kernels != RC_KERNELS_INVARIANT || tr->kernels != RC_KERNELS_INVARIANT)
        n = add_setting(t, n, x, 3, "kernels", SET_KERNELS, RC_KERNELS_INVARIANT);
    int64_t longest = 0; /* the prompts' longest: a chunk of half of it splits it */
    for (int64_t p = 0; p < x->cfg.n_prompts; p++)
        if (x->cfg.prompt_len[p] > longest)
            longest = x->cfg.prompt_len[p];
    if (longest >= 2 && sm->prefill_chunk == 0) {
        n = add_setting(t, n, x, 1, "prefill-chunk", SET_PREFILL, (longest + 1) / 2);
        if (tr->prefill_chunk == 0)
            n = add_setting(t, n, x, 2, "prefill-chunk", SET_PREFILL, (longest + 1) / 2);
    }
    if (sm->tp <= 1 && tr->tp <= 1) { /* a degree the model's heads do not allow is listed as skipped */
        n = add_setting(t, n, x, 1, "tp", SET_TP, 2);
        n = add_setting(t, n, x, 1, "tp", SET_TP, 4);
        n = add_setting(t, n, x, 1, "tp", SET_TP, 8);
        n = add_setting(t, n, x, 3, "tp", SET_TP, 2);
    }
    if (sm->kv_quant == RC_KV_AUTO)
        n = add_setting(t, n, x, 1, "kv-cache", SET_KV, RC_KV_FP8_E4M3);
    if (sm->batch != 1)
        n = add_setting(t, n, x, 1, "batch", SET_BATCH, 1);
    if (tr->batch != 1)
        n = add_setting(t, n, x, 2, "micro-batch", SET_BATCH, 1);
    if (sm->wq.kind != RC_WQ_FP8) /* an fp8 rollout engine: vLLM's online fp8 (per-tensor weights, per-token acts) */
        n = add_setting(t, n, x, 1, "weights", SET_WEIGHTS, RC_WQ_FP8);
    if (sm->wq.kind != RC_WQ_STORED && x->m && !strcmp(x->m->quant_method, "fp8")) /* the FP8 checkpoint as served */
        n = add_setting(t, n, x, 1, "weights", SET_WEIGHTS, RC_WQ_STORED);
    if (x->m && x->m->cfg.n_experts > 0) { /* MoE: the router in fp32, and R3's replay (it needs the sampler's run) */
        if ((!sm->router_f32 || !tr->router_f32) && !x->m->cfg.router_gate_f32) /* a router kept fp32 (GLM-4.5):
                                                                                 * router=fp32 changes nothing */
            n = add_setting(t, n, x, 3, "router", SET_ROUTER, 1);
        if (!sm->router_dtype && x->m->cfg.router_gate_engine_dt) /* DeepSeek-V3: vLLM's gate in the dtype */
            n = add_setting(t, n, x, 1, "router", SET_ROUTER, 0);
        if (!tr->route_replay && !x->cfg.given_logprobs)
            n = add_setting(t, n, x, 2, "routing", SET_REPLAY, 1);
    }
    if (x->m && x->m->cfg.mla) { /* latent attention: each side in the other's form */
        if (sm->mla_form != 0)
            n = add_setting(t, n, x, 1, "mla", SET_MLA, 0);
        if (sm->mla_form == 2) /* every row absorbed: what the engines' expanded prefill changes */
            n = add_setting(t, n, x, 1, "mla", SET_MLA, 1);
        if (tr->mla_form == 0)
            n = add_setting(t, n, x, 2, "mla", SET_MLA, 1);
    }
    bool hybrid = false; /* linear-attention layers: the state's precision, the chunk, the prefix cache */
    for (int64_t l = 0; x->m && l < x->m->cfg.n_layers; l++)
        hybrid = hybrid || rc_layer_is_linear(&x->m->cfg, l);
    if (hybrid) {
        if (!sm->state_dtype)
            n = add_setting(t, n, x, 1, "state", SET_STATE, 1);
        static const int64_t chunks[] = {16, 32, 128};
        for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
            if (tr->gdn_chunk != chunks[i])
                n = add_setting(t, n, x, 2, "chunk", SET_CHUNK, chunks[i]);
        if (sm->gdn_chunk != 16)
            n = add_setting(t, n, x, 1, "chunk", SET_CHUNK, 16);
        if (!sm->prefix_cache)
            n = add_setting(t, n, x, 1, "prefix-cache", SET_PREFIX, 1);
    }
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
    const double t0 = mono_now();
    for (int i = 0; i <= n_set; i++) {
        rc_sweep_row *row = &x->res.sweep[i];
        x->res.n_sweep = i + 1;
        rc_side sm = x->ro.sampler, tr = x->ro.trainer;
        if (i == 0) {
            snprintf(row->name, sizeof row->name, "base again (noise floor)");
            row->noise_floor = true;
        } else {
            snprintf(row->name, sizeof row->name, "%s", set[i - 1].name);
            sm = set[i - 1].sampler;
            tr = set[i - 1].trainer;
        }
        rc_side_str(&sm, false, row->sampler, sizeof row->sampler);
        rc_side_str(&tr, true, row->trainer, sizeof row->trainer);
        row->invariant = sm.kernels == RC_KERNELS_INVARIANT && tr.kernels == RC_KERNELS_INVARIANT &&
                         !(x->ro.sampler.kernels == RC_KERNELS_INVARIANT && x->ro.trainer.kernels == RC_KERNELS_INVARIANT);
        rc_status st = rc_side_check("sampler", &sm);
        if (st == RC_OK)
            st = rc_side_check("trainer", &tr);
        if (!x->ro.quiet) { /* the overall ETA: the settings so far, on average */
            char el[32], eta[32];
            const double t = mono_now() - t0;
            clock_str(t, el, sizeof el);
            clock_str(i > 0 ? t / i * (n_set + 1 - i) : 0, eta, sizeof eta);
            fprintf(stderr, "sweep %d/%d: %s (%s elapsed, ETA %s)\n", i + 1, n_set + 1, row->name, el,
                    i > 0 ? eta : "--:--");
        }
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

int cmd_sweep(int argc, char **argv, const char *cmdline)
{
    static run_ctx x;
    static sweep_setting set[MAX_SWEEP];
    memset(&x, 0, sizeof x);
    x.out_kind = "sweep";
    int code = parse_run_args(argc, argv, &x.ro, &k_cmd_sweep);
    if (code >= 0)
        return code;
    int n_set = x.ro.n_vary;
    for (int i = 0; i < n_set; i++) { /* every --vary spec, before any work */
        rc_status st = parse_vary(x.ro.vary[i], &x.ro, &set[i]);
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
