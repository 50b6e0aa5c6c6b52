/* ratiocheck trace: where the two sides' forward passes part. */
#include "cli.h"

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
    {"in", 0, "RUN.h5", "the run's result file (or give it as the operand)", "Input:", op_path, TO(in), 0, 0, 0, 0, 0},
    {"model", 0, "DIR", "the model folder (default: the run's model_path)", NULL, op_path, TO(model_dir), 0, 0, 0, 0, 0},
    {"worst", 0, "K", "trace the K sequences with the largest |S| (sum of log r\nat the longest length) (default 1)",
     "Sequences:", op_i64, TO(worst), 1, MAX_TRACE_SEQS, 0, 0, 0},
    {"seq", 0, "LIST", "trace these sequences (0-based, as in the HDF5 file),\ne.g. 3,17", NULL, op_path,
     TO(seq_list), 0, 0, 0, 0, 0},
    {"sampler", 0, "SPEC", "change the run's sampler side (KEY=VALUE,..., as run's)", "Sides (default: the run's):",
     op_path, TO(sampler_spec), 0, 0, 0, 0, 0},
    {"trainer", 0, "SPEC", "change the run's trainer side", NULL, op_path, TO(trainer_spec), 0, 0, 0, 0, 0},
    {"out", 0, "FILE|none", "the run file with /trace added (default:\nRUN.trace.h5 in the current folder)",
     "Output:", op_path, TO(out_path), 0, 0, 0, 0, 0},
    {"force", 0, NULL, "overwrite the output file", NULL, op_flag, TO(force), 0, 0, 0, 0, 0},
    {"json", 0, NULL, "print one JSON object instead of the table", NULL, op_flag, TO(json), 0, 0, 0, 0, 0},
    {"threads", 0, "N", "CPU threads (default: all cores)", NULL, op_i64, TO(threads), 1, 1024, 0, 0, 0},
    {"backend", 0, "cpu|cuda|auto", "where to compute (as run's --backend)", NULL, op_path, TO(backend), 0, 0, 0, 0, 0},
    {"quiet", 'q', NULL, "no progress bar", NULL, op_flag, TO(quiet), 0, 0, 0, 0, 0},
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
        RC_TRY(rc_parse_i64("--seq", buf, 0, INT64_MAX, &q));
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
    /* the root attributes through the side keys' table (side.c), on each side's defaults */
    char up[64];
    snprintf(up, sizeof up, "%s", f->upcast);
    for (char *c = up; *c; c++) /* the file joins the ops with ',', a spec with '+' */
        *c = *c == ',' ? '+' : *c;
    rc_status st = RC_OK;
    for (int t = 0; t < 2; t++) {
        rc_side *sd = t ? &ro->trainer : &ro->sampler;
        rc_side_defaults(t == 1, sd);
        sd->batch = t ? f->forward_batch : f->batch; /* --batch, --forward-batch, as opts.c gives run's sides */
        if (st == RC_OK)
            st = rc_side_set("dtype", "dtype", f->dtype, t == 1, sd);
        if (st == RC_OK)
            st = rc_side_set("kernels", "kernels", f->kernels, t == 1, sd);
        if (st == RC_OK)
            st = rc_side_set("upcast", "upcast", up, t == 1, sd);
        if (st == RC_OK)
            st = rc_side_set("logprob_dtype", "logprob-dtype", strcmp(f->logprob_dtype, "fp32") ? "same" : "fp32",
                             t == 1, sd);
    }
    if (st == RC_OK && f->sampler[0])
        st = rc_side_parse("the run's sampler", f->sampler, false, &ro->sampler);
    if (st == RC_OK && f->trainer[0])
        st = rc_side_parse("the run's trainer", f->trainer, true, &ro->trainer);
    if (st != RC_OK) /* the file's settings do not read as settings */
        return rc_errorf(RC_ERR_FORMAT, "%s: %s", path, rc_last_error());
    if (to->sampler_spec)
        RC_TRY(rc_side_parse("--sampler", to->sampler_spec, false, &ro->sampler));
    if (to->trainer_spec)
        RC_TRY(rc_side_parse("--trainer", to->trainer_spec, true, &ro->trainer));
    RC_TRY(rc_side_check("--sampler", &ro->sampler));
    return rc_side_check("--trainer", &ro->trainer);
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

/* A divergence at the route op (rc_moe_route_capture's rows): element e < E is expert e's choice, so the
 * expert sets differ there (a routing flip, the first element the expert that one side alone chose);
 * e >= E, the same experts with another weight of expert e - E. 1: a flip, 0: weights, -1: not route. */
static int route_flip(const rc_trace_out *to, const rc_trace_first *f, int64_t *expert)
{
    if (!f->found || f->op != RC_TOP_ROUTE || to->n_experts <= 0)
        return -1;
    *expert = f->element < to->n_experts ? f->element : f->element - to->n_experts;
    return f->element < to->n_experts;
}

/* to->flip from the traced route rows (rc_moe_route_capture's: [0, E) the chosen experts) */
static void first_flip(const rc_trace *t, const rc_config *c, int64_t max_pos, rc_trace_out *to)
{
    const int64_t E = c->n_experts;
    for (int64_t l = 0; E > 0 && l < c->n_layers && !to->flip.found; l++) {
        if (!rc_layer_is_moe(c, l))
            continue;
        for (int64_t k = 0; k < to->table->n_seq; k++)
            for (int64_t p = 0; p < max_pos; p++) {
                if (to->flip.found && p > to->flip.position)
                    break;
                const float *a = rc_trace_row(t, 0, k, l, RC_TOP_ROUTE, p, NULL, NULL);
                const float *b = rc_trace_row(t, 1, k, l, RC_TOP_ROUTE, p, NULL, NULL);
                int64_t e = 0;
                while (a && b && e < E && a[e] == b[e])
                    e++;
                if (!a || !b || e == E)
                    continue;
                if (!to->flip.found || p < to->flip.position || (p == to->flip.position && e < to->flip.expert)) {
                    to->flip.found = true;
                    to->flip.by_sampler = a[e] != 0.0f;
                    to->flip.layer = l;
                    to->flip.sequence = to->table->seq[k];
                    to->flip.position = p;
                    to->flip.expert = e;
                }
                break;
            }
    }
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
        int64_t ex;
        const int flip = route_flip(to, f, &ex);
        if (flip == 1)
            printf("  a routing flip: expert %lld is chosen by the %s only (the sides' inputs to the router were "
                   "equal up to here)\n", (long long)ex, f->sampler != 0.0f ? "sampler" : "trainer");
        else if (flip == 0)
            printf("  the same experts, routed with another weight of expert %lld\n", (long long)ex);
    }
    if (to->flip.found)
        printf("first routing flip: layer %lld, sequence %lld, position %lld: expert %lld chosen by the %s only\n",
               (long long)to->flip.layer, (long long)to->flip.sequence, (long long)to->flip.position,
               (long long)to->flip.expert, to->flip.by_sampler ? "sampler" : "trainer");
    else if (to->n_experts > 0)
        printf("first routing flip: none (both sides choose the same experts at every traced position)\n");
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
        printf("written: %s (/trace; tools/plots/plot_ratios.py draws its layer x op heatmap)\n", out_path);
}

static void print_trace_json(const rc_trace_out *to, const char *in, const char *out_path, double seconds)
{
    const rc_trace_table *tt = to->table;
    const rc_trace_first *f = &tt->first;
    printf("{\"input\": ");
    rc_json_str(stdout, in);
    printf(", \"output\": ");
    if (out_path)
        rc_json_str(stdout, out_path);
    else
        printf("null");
    printf(", \"sampler\": ");
    rc_json_str(stdout, to->sampler);
    printf(", \"trainer\": ");
    rc_json_str(stdout, to->trainer);
    printf(", \"len\": %lld, \"layers\": %lld, \"sequences\": [", (long long)to->len, (long long)to->n_layers);
    for (int64_t k = 0; k < tt->n_seq; k++)
        printf("%s%lld", k ? ", " : "", (long long)tt->seq[k]);
    printf("], \"replay_tokens\": %lld, \"replay_equal_gen\": %lld, \"replay_equal_fwd\": %lld, ",
           (long long)to->replay_tokens, (long long)to->replay_equal_gen, (long long)to->replay_equal_fwd);
    rc_json_num(stdout, "seconds", seconds, true);
    printf("\"first\": ");
    if (!f->found) {
        printf("null");
    } else {
        printf("{\"layer\": %lld, \"op\": \"%s\", \"sequence\": %lld, \"position\": %lld, \"element\": %lld, ",
               (long long)f->layer, rc_trace_op_name(f->op), (long long)f->sequence, (long long)f->position,
               (long long)f->element);
        rc_json_num(stdout, "sampler", (double)f->sampler, true);
        rc_json_num(stdout, "trainer", (double)f->trainer, true);
        rc_json_num(stdout, "ulp", f->ulp, true);
        printf("\"sampler_rows\": %lld, \"trainer_rows\": %lld", (long long)f->sampler_rows,
               (long long)f->trainer_rows);
        int64_t ex;
        const int flip = route_flip(to, f, &ex);
        if (flip >= 0)
            printf(", \"routing_flip\": %s, \"expert\": %lld", flip ? "true" : "false", (long long)ex);
        putchar('}');
    }
    if (to->n_experts > 0 && to->flip.found)
        printf(", \"first_flip\": {\"layer\": %lld, \"sequence\": %lld, \"position\": %lld, \"expert\": %lld, "
               "\"chosen_by\": \"%s\"}", (long long)to->flip.layer, (long long)to->flip.sequence,
               (long long)to->flip.position, (long long)to->flip.expert, to->flip.by_sampler ? "sampler" : "trainer");
    else if (to->n_experts > 0)
        printf(", \"first_flip\": null");
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
            rc_json_num(stdout, "equal_frac", (double)c->equal / (double)c->count, true);
            rc_json_num(stdout, "max_abs", c->max_abs, true);
            rc_json_num(stdout, "rel_l2", c->rel_l2, true);
            rc_json_num(stdout, "max_ulp", c->max_ulp, false);
            printf("}");
            any = true;
        }
    printf("]}\n");
}

int cmd_trace(int argc, char **argv, const char *cmdline)
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
            int64_t *idx = rc_show_pick(&orig, 0, to.worst > 0 ? to.worst : 1, &n_sel);
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
        rc_side_str(&ro->sampler, false, sd_s, sizeof sd_s);
        rc_side_str(&ro->trainer, true, sd_t, sizeof sd_t);
        tout = (rc_trace_out){tt, sd_s, sd_t, L, x.m->cfg.n_layers, lp, lp + n_sel * L, 0, 0, 0, x.m->cfg.n_experts,
                              {0}};
        first_flip(tr, &x.m->cfg, x.cfg.prompt_max + L, &tout);
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
