/* ratiocheck score: rollouts an engine logged, re-scored as the trainer. */
#include "cli.h"
#include "align.h"

/* score's options (run_opts' score part), as score_load reads them */
typedef struct {
    const char *rollouts, *format, *kind;
    int64_t chunk; /* 0: RC_SCORE_CHUNK_ROLLOUTS */
    bool check_only, sweep;
    bool temperature, top_k, top_p, forward_batch; /* given on the command line */
    bool logged; /* both sides logged (trainer_logprobs) and no --model: no model, no forward */
} score_args;

/* the ids of a file read with no model: any id an int32 holds, any length */
#define SCORE_ANY_VOCAB ((int64_t)INT32_MAX + 1)

/* Whether the file's records carry trainer_logprobs (its first rollout
 * decides: every record has them or none does). A file that cannot be read
 * says no here; the full read names the problem. */
static bool score_has_trainer(const char *path, const char *format)
{
    rc_rollout_format fmt = RC_RFMT_AUTO;
    if (format && rc_rollout_format_parse(format, &fmt) != RC_OK) {
        rc_clear_error();
        return false;
    }
    rc_rollout_reader *R = NULL;
    const rc_rollout_set *c = NULL;
    bool has = false;
    if (rc_rollouts_open(path, fmt, SCORE_ANY_VOCAB, 0, NULL, NULL, &R) == RC_OK &&
        rc_rollouts_next(R, 1, 0, &c) == RC_OK)
        has = c->has_trainer;
    rc_rollouts_close(R);
    rc_clear_error();
    return has;
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
                            rc_score_align *text_notes, rc_align_probe *probe)
{
    const int64_t vocab = x->m ? x->m->cfg.vocab : SCORE_ANY_VOCAB, max_pos = x->m ? x->m->cfg.max_pos : 0;
    const run_opts *ro = &x->ro;
    const bool bar = !ro->quiet && isatty(STDERR_FILENO) && !(getenv("TERM") && !strcmp(getenv("TERM"), "dumb"));
    rc_rollout_reader *R = NULL;
    RC_TRY(rc_rollouts_open(sa->rollouts, fmt, vocab, max_pos, bar ? score_read_progress : NULL,
                            (void *)sa->rollouts, &R));
    const rc_rollout_set *c = NULL;
    rc_status st = rc_rollouts_next(R, RC_ROLLOUT_TEXT_KEPT, 0, &c), text_st = RC_OK;
    char text_err[1400] = "";
    if (st == RC_OK && probe)
        st = rc_align_probe_take(c, probe); /* the first rollouts, for the alignment hypotheses */
    if (st == RC_OK && x->tok) {
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
        set->has_trainer = c->has_trainer;
    }
    rc_rollouts_close(R);
    if (st == RC_OK && text_st != RC_OK)
        st = rc_errorf(text_st, "%s", text_err);
    return st;
}

/* The alignment hypotheses (align.h) on the first rollouts, with the
 * settings as the file and the command line declare them, on an engine of
 * the trainer's numerics at temperature 1 (freed before the trainer's). */
static rc_status score_hypotheses(run_ctx *x, const score_args *sa, const rc_rollout_set *set,
                                  const rc_align_probe *probe, rc_score_align *notes)
{
    const bool processed = set->kind_given ? set->kind == RC_LP_PROCESSED : sa->kind && !strcmp(sa->kind, "processed");
    const bool t_given = set->temperature_given || sa->temperature;
    const double t = set->temperature_given ? set->temperature : sa->temperature ? x->ro.temperature : 1.0;
    const int64_t k = set->top_k_given ? set->top_k : sa->top_k ? x->ro.cfg.sampling.top_k : 0;
    const double p = set->top_p_given ? set->top_p : sa->top_p ? x->ro.cfg.sampling.top_p : 1.0;
    rc_backend *be = NULL;
    RC_TRY(backend_for(x, x->ro.trainer.kernels, &be));
    /* fp32 (the clearest comparison) while its engine needs at most
     * RC_ALIGN_FP32_BYTES, else the trainer's numerics (no more memory than
     * its own engine's); at temperature 1 */
    rc_numerics num = rc_numerics_fp32();
    rc_engine_mem mem;
    int64_t longest = 1;
    for (int64_t i = 0; i < probe->n; i++)
        longest = probe->plen[i] + probe->rlen[i] > longest ? probe->plen[i] + probe->rlen[i] : longest;
    if (rc_engine_mem_estimate(x->m, &num, !x->use_cuda, x->ro.trainer.kernels, 1, longest, longest, &mem) != RC_OK ||
        mem.total > RC_ALIGN_FP32_BYTES) {
        rc_clear_error();
        num = x->cfg.num_trainer;
    }
    num.temperature = 1.0f;
    rc_align_result ar;
    const rc_status st = rc_align_hypotheses(x->m, be, &num, probe, sa->rollouts, !processed, t, t_given,
                                             processed && (k > 0 || p < 1.0), &ar, notes);
    rc_backend_destroy(be);
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
    const int64_t chunk = sa->chunk > 0 ? sa->chunk : RC_SCORE_CHUNK_ROLLOUTS;
    rc_status st = RC_OK;
    if (!sa->logged) { /* the model and its tokenizer; both sides logged: neither */
        RC_TRY(rc_model_load_layers(ro->model_dir, ro->layers, false, &x->m));
        const rc_config *mc = &x->m->cfg;
        warn_eos(ro->model_dir, mc);
        char *tp = rc_path_join(ro->model_dir, "tokenizer.json");
        bool have_tok = false;
        st = tp ? optional_file(tp, &have_tok) : rc_errorf(RC_ERR_NOMEM, "out of memory");
        if (st == RC_OK && have_tok)
            st = rc_tokenizer_load(tp, mc->vocab, &x->tok);
        free(tp);
        RC_TRY(st);
    }
    const int64_t vocab = x->m ? x->m->cfg.vocab : SCORE_ANY_VOCAB, max_pos = x->m ? x->m->cfg.max_pos : 0;
    rc_align_probe probe;
    memset(&probe, 0, sizeof probe);
    st = score_scan(x, sa, fmt, set, text_notes, &probe);
    if (st == RC_OK && !sa->check_only && x->m) /* the hypotheses need the model's own forward */
        st = score_hypotheses(x, sa, set, &probe, text_notes);
    rc_align_probe_free(&probe);
    RC_TRY(st);
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
    RC_TRY(rc_rollouts_load(sa->rollouts, fmt, vocab, max_pos, NULL, NULL, &all));
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

/* The backends of the trainer's rc_side and the reference. */
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

/* The alignment checks on the trainer column (three columns): the user's
 * trainer_logprobs against ratiocheck's forward, as the sampler's are; an
 * error or a warning names the column. */
static rc_status score_check_trainer_column(const rc_results *r, const float *yours, int64_t stride,
                                            const rc_rollout_set *set, const char *path, rc_score_align *al)
{
    rc_results t = *r; /* the same tensors, the user's trainer in the logged column */
    const int64_t G = r->gen_len;
    float *col = NULL;
    RC_TRY(rc_calloc((void **)&col, r->n_seq * G + 1, sizeof *col, "alignment"));
    for (int64_t q = 0; q < r->n_seq; q++)
        for (int64_t t2 = 0; t2 < G; t2++)
            col[q * G + t2] = t2 < r->gen_valid[q] && t2 < stride ? yours[q * stride + t2] : NAN;
    t.logprob_gen = col;
    rc_score_align a;
    rc_status st = rc_score_check_alignment(set, path, &t, &a);
    free(col);
    if (st != RC_OK) {
        char why[1400];
        snprintf(why, sizeof why, "%s", rc_last_error());
        return rc_errorf(st, "trainer_logprobs: %s", why);
    }
    for (int i = 0; i < a.n_warnings && al->n_warnings < 4; i++)
        snprintf(al->warnings[al->n_warnings++], sizeof al->warnings[0], "trainer_logprobs: %.290s", a.warnings[i]);
    return RC_OK;
}

/* A file of more than one chunk (README "Memory and speed"): the rollouts
 * read again chunk by chunk, each padded to the file's widths, scored
 * (trainer forward and reference, as one run over its rows), checked for
 * alignment (the first chunk), fed to the statistics in file order and
 * written to the output's rows, then freed. x->res gets the statistics and
 * the sizes (no per-sequence arrays); *hs the output file being written
 * (NULL with --out none), which the caller finishes or aborts. */
static rc_status score_chunks(run_ctx *x, const score_args *sa, const score_plan *pl, const rc_rollout_set *set,
                              rc_score_align *al, rc_threeway_acc *tw, rc_h5_stream **hs)
{
    *hs = NULL;
    rc_score_steady_heap();
    if (!sa->logged)
        RC_TRY(score_backends(x));
    const int64_t vocab = x->m ? x->m->cfg.vocab : SCORE_ANY_VOCAB, max_pos = x->m ? x->m->cfg.max_pos : 0;
    const double t0 = omp_get_wtime();
    rc_rollout_reader *R = NULL;
    RC_TRY(rc_rollouts_open(sa->rollouts, pl->fmt, vocab, max_pos, NULL, NULL, &R));
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
        if (sa->logged) { /* both sides logged: no forward */
            st = rc_score_logged_results(&in, cfg.n_lens, cfg.lens, &cfg.stat, &cr);
        } else {
            if (chunk == 0)
                st = score_probe(x, &cfg, set, sa->rollouts);
            if (st == RC_OK)
                st = run_check_polled(x, x->be, x->ref_be, &cfg, &cr);
            if (st == RC_OK && chunk == 0)
                st = rc_score_check_alignment(set, sa->rollouts, &cr, al);
            if (st == RC_OK && in.trainer_logprobs && chunk == 0)
                st = score_check_trainer_column(&cr, in.trainer_logprobs, in.resp_max, set, sa->rollouts, al);
            if (st == RC_OK && in.trainer_logprobs) /* three columns: the logged pair in the statistics */
                st = rc_score_adopt_trainer(&in, &cr, tw);
        }
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
        for (int i = 0; i < cr.n_lens && st == RC_OK && cr.logprob_trainer; i++) { /* the logged pair's S and M */
            rc_len_result *lr = &cr.lens[i];
            free(lr->seq_log_ratio_sum);
            free(lr->seq_log_ratio_mean);
            lr->seq_log_ratio_sum = lr->seq_log_ratio_mean = NULL;
            st = rc_calloc((void **)&lr->seq_log_ratio_sum, cr.n_seq + 1, sizeof(double), "results");
            if (st == RC_OK)
                st = rc_calloc((void **)&lr->seq_log_ratio_mean, cr.n_seq + 1, sizeof(double), "results");
        }
        for (int64_t q = 0; q < cr.n_seq && st == RC_OK; q++) { /* file order: rollout done + q */
            const int64_t G = cr.gen_len;
            for (int i = 0; i < cr.n_lens; i++)
                fwd[i] = cr.lens[i].logprob_fwd + q * cr.lens[i].len;
            st = rc_stats_acc_add(acc, cr.gen_valid[q], cr.logprob_gen + q * G,
                                  cr.entropy_gen ? cr.entropy_gen + q * G : NULL,
                                  cr.logprob_ref ? cr.logprob_ref + q * G : NULL, fwd, S, M);
            for (int i = 0; i < cr.n_lens && cr.logprob_trainer; i++) {
                cr.lens[i].seq_log_ratio_sum[q] = S[i];
                cr.lens[i].seq_log_ratio_mean[q] = M[i];
            }
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

int cmd_score(int argc, char **argv, const char *cmdline)
{
    static run_ctx x;
    memset(&x, 0, sizeof x);
    int code = parse_run_args(argc, argv, &x.ro, &k_cmd_score);
    if (code >= 0)
        return code;
    const run_opts *o = &x.ro;
    if (!o->rollouts)
        return usage_error("score needs --rollouts FILE (ratiocheck score --help)");
    /* both sides logged and no --model: the two columns compared as they are */
    const bool logged = o->model_dir == o->model_default && score_has_trainer(o->rollouts, o->format);
    const score_args sa = {o->rollouts, o->format, o->logprobs_kind, o->chunk_rollouts, o->check_only,
                           o->sweep || o->n_vary > 0, o->temperature_given, o->top_k_given, o->top_p_given,
                           o->forward_batch_given, logged};
    if (logged && sa.sweep)
        return usage_error("score: --sweep / --vary replay ratiocheck's trainer: give --model DIR (%s carries both "
                           "sides; without --model no forward runs)", o->rollouts);
    if (logged && o->cfg.reference)
        return usage_error("score: --reference runs the model: give --model DIR (%s carries both sides; without "
                           "--model no forward runs)", o->rollouts);
    if (logged && !o->out_path) { /* the default output: the file's name, not the bundled model's */
        const char *b = strrchr(o->rollouts, '/');
        b = b ? b + 1 : o->rollouts;
        const char *dot = strrchr(b, '.');
        const int n = dot && dot > b ? (int)(dot - b) : (int)strlen(b);
        snprintf(x.out_stem, sizeof x.out_stem, "%.*s", n, b);
    }
    for (int i = 0; i < o->n_vary; i++)
        if (strncmp(o->vary[i], "trainer:", 8) != 0)
            return usage_error("score: --vary '%s': only the trainer varies (trainer:SPEC); the sampler is the "
                               "logged file", o->vary[i]);
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
    rc_threeway_acc tw;
    memset(&tw, 0, sizeof tw);
    score_plan plan;
    memset(&plan, 0, sizeof plan);
    rc_h5_stream *hs = NULL;
    memset(&al, 0, sizeof al);
    memset(&text_notes, 0, sizeof text_notes);
    rc_status st = run_prepare(&x);
    if (st == RC_OK)
        st = score_load(&x, &sa, &set, &in, &text_notes, &plan);
    if (st == RC_ERR_FORMAT && x.ro.model_dir == x.ro.model_default && strstr(rc_last_error(), "vocabulary")) {
        char why[1024]; /* ids from another model's vocabulary, read against the bundled one */
        snprintf(why, sizeof why, "%s", rc_last_error());
        st = rc_errorf(st, "%s; without --model the bundled model (%s) was used: give --model DIR, the model the "
                       "rollouts came from", why, x.ro.model_dir);
    }
    if (st == RC_OK && logged && !sa.check_only && x.cfg.lens[x.cfg.n_lens - 1] > plan.G) /* as a forward would */
        st = rc_errorf(RC_ERR_USAGE, "--len %lld exceeds the %lld tokens of the replayed rollouts",
                       (long long)x.cfg.lens[x.cfg.n_lens - 1], (long long)plan.G);
    for (int i = 0; i < text_notes.n_warnings; i++)
        fprintf(stderr, "ratiocheck: warning: %s\n", text_notes.warnings[i]);
    if (st == RC_OK && sa.check_only) { /* what the file holds, no forward pass */
        const int64_t toks = set.n_tokens, resp = set.n_response_tokens;
        printf("%s: %s, %lld rollouts, %lld prompt + %lld response tokens (longest %lld + %lld), %s log-probs%s, "
               "temperature %g, top_k %lld, top_p %g: OK for %s\n", sa.rollouts, rc_rollout_format_name(set.format),
               (long long)set.n, (long long)(toks - resp), (long long)resp, (long long)set.prompt_max,
               (long long)set.resp_max, set.kind == RC_LP_RAW ? "raw" : "processed",
               set.has_trainer ? " and trainer_logprobs" : "", set.temperature, (long long)set.top_k, set.top_p,
               logged ? "both sides as logged (no model)" : x.ro.model_dir);
        rc_rollouts_free(&set);
        rc_score_inputs_free(&in);
        run_free(&x);
        return 0;
    }
    static sweep_setting vset[MAX_SWEEP];
    int n_set = 0;
    for (int i = 0; i < x.ro.n_vary && st == RC_OK; i++) /* every --vary spec, before any work */
        st = parse_vary(x.ro.vary[i], &x.ro, &vset[n_set++]);
    if (st == RC_OK && plan.chunked) {
        st = score_chunks(&x, &sa, &plan, &set, &al, &tw, &hs);
    } else if (st == RC_OK && logged) { /* both sides logged: no forward */
        const double t0 = omp_get_wtime();
        st = rc_score_logged_results(&in, x.cfg.n_lens, x.cfg.lens, &x.cfg.stat, &x.res);
        if (st == RC_OK)
            st = rc_compute_stats(&x.res);
        x.res.seconds_total = omp_get_wtime() - t0;
    } else if (st == RC_OK) {
        st = score_compute(&x, &set, sa.rollouts);
        if (st == RC_OK)
            st = rc_score_check_alignment(&set, sa.rollouts, &x.res, &al);
        if (st == RC_OK && in.trainer_logprobs)
            st = score_check_trainer_column(&x.res, in.trainer_logprobs, in.resp_max, &set, sa.rollouts, &al);
        if (st == RC_OK && in.trainer_logprobs && !sa.sweep) /* three columns: the logged pair in the statistics */
            st = rc_score_adopt_trainer(&in, &x.res, &tw);
        if (st == RC_OK && in.trainer_logprobs && !sa.sweep)
            st = rc_compute_stats(&x.res);
    }
    if (st == RC_OK && set.has_trainer && !logged && !sa.sweep) { /* the three columns' summary */
        st = rc_calloc((void **)&x.res.threeway, 1, sizeof *x.res.threeway, "results");
        if (st == RC_OK) {
            x.res.threeway->len = x.res.gen_len;
            rc_side_str(&x.ro.trainer, true, x.res.threeway->ratiocheck, sizeof x.res.threeway->ratiocheck);
            if (x.cfg.reference)
                snprintf(x.res.threeway->ref, sizeof x.res.threeway->ref, "fp%d", x.cfg.reference);
            rc_threeway_finish(&tw, x.res.threeway);
        }
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
            vset[n_set].sampler = x.ro.sampler; /* a setting of both sides: the trainer's half */
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
        rc_side_str(&x.ro.trainer, true, tr, sizeof tr);
        if (set.has_trainer && !sa.sweep) /* the statistics compare the two logged columns */
            snprintf(x.res.trainer, sizeof x.res.trainer, "logged (trainer_logprobs)%s%.100s",
                     logged ? "" : "; ratiocheck's: ", logged ? "" : tr);
        else
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
