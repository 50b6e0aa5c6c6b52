/* ratiocheck run: sample, re-score, report; the steps sweep, score and trace share. */
#include "cli.h"

/* Before any work: the backend (cuda: that or the reason, never a silent
 * fallback; auto: cuda when this build has it and a device answers), and
 * the output path, decided and checked. */
rc_status run_prepare(run_ctx *x)
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
        x->n_visible = nd;
        if (want_cuda && st != RC_OK) /* the reason, before any work */
            return st;
        rc_clear_error();
    }
    RC_TRY(check_gpus(&x->ro.gpus, x->ro.n_split));
    if (x->ro.gpus > 1 && !x->use_cuda)
        return rc_errorf(RC_ERR_USAGE, "--gpus %lld splits the model over CUDA GPUs; this run computes on the CPU "
                         "(--backend cuda, in a build with CUDA)", (long long)x->ro.gpus);
    if (x->ro.gpus > 1) { /* the device as the results name it: "N x NAME" */
        char one[sizeof x->device];
        memcpy(one, x->device, sizeof one);
        snprintf(x->device, sizeof x->device, "%lld x %.100s", (long long)x->ro.gpus, one);
    }
    x->cfg = ro->cfg;
    x->cfg.seed = (uint64_t)ro->seed;
    /* tests: --distribution's window (positions of the sampler's rows held), docs/statistics.md "Distribution" */
    const char *dw = getenv("RATIOCHECK_DIST_WINDOW");
    if (dw)
        RC_TRY(rc_parse_i64("RATIOCHECK_DIST_WINDOW", dw, 1, (int64_t)1 << 40, &x->cfg.dist_window));
    /* tests: every compared pair of rows into this file (tools/checks/dist_ref.py checks them with PyTorch) */
    const char *dd = getenv("RATIOCHECK_DIST_DUMP");
    if (dd && x->cfg.distribution && !(x->cfg.dist_dump = fopen(dd, "wb")))
        return rc_errorf(RC_ERR_IO, "%s: cannot create: %s", dd, strerror(errno));
    rc_side_apply(&ro->sampler, &ro->trainer, ro->temperature, &x->cfg);
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
        if (x->out_stem[0]) /* score with both sides logged: no model, the file's name */
            snprintf(x->out_default, sizeof x->out_default, "%s.%s.h5", x->out_stem,
                     x->out_kind ? x->out_kind : "ratiocheck");
        else
            snprintf(x->out_default, sizeof x->out_default, "%.*s.%s.%s.h5", (int)nl, name,
                     rc_dtype_str(x->cfg.num.dt), x->out_kind ? x->out_kind : "ratiocheck");
        /* a re-run keeps the earlier results: the first of NAME.h5,
         * NAME.1.h5, NAME.2.h5 ... that does not exist (--force: NAME.h5) */
        const size_t dl = strlen(x->out_default) - 3; /* NAME, without ".h5" */
        struct stat sb;
        for (int k = 1; !ro->force && lstat(x->out_default, &sb) == 0; k++) {
            if (k == 1000000)
                return rc_errorf(RC_ERR_IO, "%.*s.h5 and its numbered names up to .999999.h5 exist; give --out",
                                 (int)dl, x->out_default);
            snprintf(x->out_default + dl, sizeof x->out_default - dl, ".%d.h5", k);
        }
        if (strlen(x->out_default) > dl + 3)
            fprintf(stderr,
                    "ratiocheck: %.*s.h5 exists; writing %s (--out to choose the name, --force to overwrite)\n",
                    (int)dl, x->out_default, x->out_default);
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
rc_status run_load(run_ctx *x)
{
    const run_opts *ro = &x->ro;
    rc_status st = rc_model_load_layers(ro->model_dir, ro->layers, false, &x->m); /* first: text prompts need its tokenizer */
    if (st != RC_OK)
        return st;
    const rc_config *mc = &x->m->cfg;
    warn_eos(ro->model_dir, mc);
    if (!ro->quiet && !strcmp(x->m->quant_method, "fp8"))
        fprintf(stderr, "ratiocheck: %s is an FP8 block checkpoint ([%lld, %lld] blocks): unless --sampler "
                "weights=as-stored (the stored fp8 weights, as vLLM / SGLang serve them), both sides read its weights "
                "dequantized as transformers does\n", ro->model_dir, (long long)x->m->qsizes.block[0],
                (long long)x->m->qsizes.block[1]);
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
        const rc_prompt_limits lim = {ro->num_prompts, mc->max_pos, cfg->lens[cfg->n_lens - 1], ro->chat_kwargs};
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
    for (int64_t p = 0; p < pr->n; p++) { /* longrope past its original context (rc_config_check_positions) */
        rc_status s = rc_config_check_positions(mc, pr->len[p] + cfg->lens[cfg->n_lens - 1]);
        if (s != RC_OK)
            return rc_error_prefix(s, "%s:%lld", x->prompts_path, (long long)pr->line[p]);
    }
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
rc_status backend_for(const run_ctx *x, rc_kernels k, rc_backend **out)
{
    if (!x->use_cuda)
        return rc_backend_cpu_create(x->n_threads, k, out);
    RC_TRY(rc_backend_cuda_create(k, out));
    if (x->ro.gpus > 1) { /* a layer split over the GPUs (forward.c) */
        rc_status st = (*out)->ops->use_devices(*out, (int)x->ro.gpus);
        if (st != RC_OK) {
            rc_backend_destroy(*out);
            *out = NULL;
            return st;
        }
        for (int d = 0; d < x->ro.n_split; d++)
            (*out)->layer_split[d] = x->ro.layer_split[d];
    }
    return RC_OK;
}

/* The two sides' backends: the sampler's, and the trainer's when its kernels differ (else NULL). */
rc_status side_backends(const run_ctx *x, const rc_side *sm, const rc_side *tr, rc_backend **be, rc_backend **tbe)
{
    *be = *tbe = NULL;
    rc_status st = backend_for(x, sm->kernels, be);
    if (st == RC_OK && tr->kernels != sm->kernels)
        st = backend_for(x, tr->kernels, tbe);
    return st;
}

/* rc_run_check with the progress bar, polling the interrupt flag (the only
 * work that does; signals elsewhere end the process at once) */
rc_status run_check_polled(const run_ctx *x, rc_backend *be, rc_backend *ref_be, const rc_rollout_cfg *cfg,
                                  rc_results *out)
{
    progress_state ps = progress_start(x->ro.quiet);
    g_polling = 1;
    rc_status st = g_interrupted_flag ? rc_errorf(RC_ERR_INTERRUPTED, "interrupted")
                                      : rc_run_check(x->m, be, ref_be, cfg, progress_cb, &ps, &g_interrupted_flag, out);
    g_polling = 0;
    if (st == RC_OK && g_interrupted_flag) /* arrived after the last check */
        st = rc_errorf(RC_ERR_INTERRUPTED, "interrupted");
    if (ps.enabled && !ps.lines)
        fprintf(stderr, "\r\033[K");
    return st;
}

/* The GPUs the run's layers are split over (CUDA backend), before any device memory is taken: --gpus N /
 * --layer-split as given, each GPU's estimate checked against its free memory; without them the fewest GPUs
 * whose split fits (place.h; docs/gpu.md "Choosing the number of GPUs"). A split chosen so is said on stderr;
 * the plan goes into the results (gpu_split). */
rc_status run_place_gpus(run_ctx *x)
{
    if (!x->use_cuda || !x->m || x->placed)
        return RC_OK;
    x->placed = true;
    rc_engine_shape eng[RC_RUN_MAX_ENGINES];
    const int n_eng = rc_run_engine_shapes(x->m, &x->cfg, x->ro.sampler.kernels, x->ro.trainer.kernels, eng);
    if (n_eng == 0)
        return RC_OK; /* rc_run_check refuses the settings, by its own message */
    rc_gpu_plan plan;
    RC_TRY(rc_gpu_plan_make(x->m, eng, n_eng, x->n_visible, (int)x->ro.gpus,
                            x->ro.n_split > 0 ? x->ro.layer_split : NULL, rc_cuda_mem_info, &plan));
    if (plan.checked)
        rc_gpu_plan_str(&plan, x->gpu_split, sizeof x->gpu_split);
    x->gpus_auto = plan.automatic;
    if (plan.automatic && plan.n_dev > 1) {
        x->ro.gpus = plan.n_dev;
        char one[sizeof x->device], need[32], fr[32], split[160];
        memcpy(one, x->device, sizeof one);
        snprintf(x->device, sizeof x->device, "%d x %.100s", plan.n_dev, one);
        rc_bytes_pair_str(plan.need_one, plan.free_b[0], need, fr, sizeof need);
        rc_gpu_split_str(&plan, split, sizeof split);
        fprintf(stderr, "ratiocheck: the model needs %s on one GPU, GPU 0 has %s free: layers split over %d GPUs (%s)\n",
                need, fr, plan.n_dev, split);
    }
    return RC_OK;
}

rc_status run_compute(run_ctx *x)
{
    const run_opts *ro = &x->ro;
    x->n_threads = ro->threads > 0 ? (int)ro->threads : omp_get_num_procs();
    if (x->use_cuda)
        omp_set_num_threads(x->n_threads); /* host work: sampling, the fp64 reference */
    RC_TRY(run_place_gpus(x));
    rc_status st = side_backends(x, &ro->sampler, &ro->trainer, &x->be, &x->trainer_be);
    x->cfg.trainer_be = x->trainer_be;
    if (st == RC_OK && x->cfg.reference == 32) /* the reference runs where the check runs */
        st = backend_for(x, RC_KERNELS_INVARIANT, &x->ref_be);
    if (st == RC_OK)
        st = run_check_polled(x, x->be, x->ref_be, &x->cfg, &x->res);
    if (st == RC_ERR_DEVICE && x->gpus_auto && strstr(rc_last_error(), "too little GPU memory")) {
        /* the estimate fitted, the GPU did not (memory the estimate cannot see: another process's, the CUDA
         * context's, fragmentation): say what to give instead */
        char msg[1024];
        const int n = ro->gpus > 1 ? (int)ro->gpus : 1;
        snprintf(msg, sizeof msg, "%s", rc_last_error());
        if (n < x->n_visible && n < RC_MAX_DEVICES)
            st = rc_errorf(st, "%s; the number of GPUs (%d) was chosen by the estimate of free memory before the run: "
                           "give --gpus %d", msg, n, n + 1);
        else
            st = rc_errorf(st, "%s; the estimate of free memory before the run fitted %d GPU%s: give a smaller "
                           "--batch / --forward-batch", msg, n, n > 1 ? "s" : "");
    }
    return st;
}

/* The run's settings, prompt texts and completions into the results, and
 * the results into the HDF5 file. */
/* every generated sequence of res decoded with tok (res->completion) */
rc_status decode_completions(const rc_tokenizer *tok, rc_results *res)
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
rc_status run_settings(run_ctx *x, const char *cmdline)
{
    const run_opts *ro = &x->ro;
    const rc_rollout_cfg *cfg = &x->cfg;
    rc_results *res = &x->res;
    snprintf(res->version, sizeof res->version, "%s", RC_VERSION);
    res->command_line = strdup(cmdline);
    res->model_path = strdup(x->m ? ro->model_dir : "none (both sides logged)"); /* score: no model */
    if (!res->command_line || !res->model_path)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    if (!x->m) { /* score with both sides logged: no model, no engine */
        snprintf(res->layers, sizeof res->layers, "none");
        snprintf(res->backend, sizeof res->backend, "none");
    } else if (snprintf(res->model_type, sizeof res->model_type, "%s", x->m->cfg.model_type) >= 0 &&
               x->m->cfg.n_layers < x->m->cfg.n_layers_model) /* --layers N */
        snprintf(res->layers, sizeof res->layers, "%lld of %lld", (long long)x->m->cfg.n_layers,
                 (long long)x->m->cfg.n_layers_model);
    else
        snprintf(res->layers, sizeof res->layers, "all");
    snprintf(res->dtype, sizeof res->dtype, "%s", rc_dtype_str(cfg->num.dt));
    snprintf(res->kernels, sizeof res->kernels, "%s", rc_kernels_name(ro->sampler.kernels));
    if ((ro->sampler_spec || ro->trainer_spec) && !res->trainer[0]) { /* both sides, when a spec was given */
        rc_side_str(&ro->sampler, false, res->sampler, sizeof res->sampler);
        rc_side_str(&ro->trainer, true, res->trainer, sizeof res->trainer);
    }
    rc_upcast_str(cfg->num.upcast, res->upcast, sizeof res->upcast);
    snprintf(res->alibi_bias, sizeof res->alibi_bias, "%s", cfg->num.alibi_rowmax ? "rowmax" : "model");
    snprintf(res->logprob_dtype, sizeof res->logprob_dtype, "%s", ro->sampler.lp_same ? rc_dtype_str(cfg->num.dt) : "fp32");
    snprintf(res->reference, sizeof res->reference, "%s",
             cfg->reference == 32 ? "fp32" : cfg->reference == 64 ? "fp64" : "none");
    if (x->be)
        snprintf(res->backend, sizeof res->backend, "%s", x->be->ops->name);
    snprintf(res->device, sizeof res->device, "%s", x->use_cuda ? x->device : "");
    snprintf(res->gpu_split, sizeof res->gpu_split, "%s", x->use_cuda ? x->gpu_split : "");
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
    res->gate_fail = eval_gates(ro, res, res->gate_rules, sizeof res->gate_rules, res->gate_failed,
                                sizeof res->gate_failed, NULL); /* the file records the gate */
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
rc_status run_record(run_ctx *x, const char *cmdline)
{
    RC_TRY(run_settings(x, cmdline));
    if (x->tok)
        RC_TRY(decode_completions(x->tok, &x->res));
    return x->out_path ? rc_h5_write(&x->res, x->out_path, x->ro.force) : RC_OK;
}

/* The table or JSON, the completions, the gates: the exit code. */
int run_report(const run_ctx *x)
{
    const run_opts *ro = &x->ro;
    const rc_results *res = &x->res;
    char rules[sizeof res->gate_rules], failed[sizeof res->gate_failed];
    const bool gate_fail = eval_gates(ro, res, rules, sizeof rules, failed, sizeof failed, stderr);
    const int code = gate_fail ? rc_exit_code(RC_ERR_GATE) : 0;
    const int gates = rules[0] ? gate_fail : -1;
    rc_show_sel sel = {x->tok, NULL, 0};
    int64_t *idx = NULL;
    if (ro->show > 0 || ro->show_worst > 0) {
        idx = rc_show_pick(res, ro->show, ro->show_worst, &sel.n);
        if (!idx)
            return fail(rc_errorf(RC_ERR_NOMEM, "out of memory"));
        sel.idx = idx;
    }
    if (ro->json) {
        rc_print_json(res, x->out_path, gates, &sel);
    } else {
        rc_print_table(res, x->out_path, gates, ro->by);
        if (idx)
            rc_print_show(res, x->tok, idx, sel.n, ro->show_worst > 0);
    }
    free(idx);
    return code;
}

void run_free(run_ctx *x)
{
    if (x->cfg.dist_dump)
        fclose(x->cfg.dist_dump);
    x->cfg.dist_dump = NULL;
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
rc_status run_narrow_model(run_ctx *x)
{
    const rc_rollout_cfg *c = &x->cfg;
    if (c->reference != 0 || c->num.dt != c->num_trainer.dt)
        return RC_OK;
    return rc_model_narrow(x->m, c->num.dt);
}

/* parse -> prepare -> load -> compute -> record -> report, one cleanup */
int cmd_run(int argc, char **argv, const char *cmdline)
{
    static run_ctx x; /* large (paths, options); one run per process */
    memset(&x, 0, sizeof x);
    int code = parse_run_args(argc, argv, &x.ro, &k_cmd_run);
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
