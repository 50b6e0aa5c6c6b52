/* ratiocheck report and diff: a result file's summary again, two runs side by side. */
#include "cli.h"
#include "routing.h"

/* ---- report and diff ------------------------------------------------------ */

/* options of report / diff: --json and --help */
typedef struct {
    bool json, help;
} results_opts;

static const opt_spec k_results_opts[] = {
    {"json", 0, NULL, "print one JSON object instead of the table", NULL, op_flag, offsetof(results_opts, json), 0,
     0, 0, 0, 0},
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
     0, 0, 0, 0},
    {"by", 0, "prob|entropy|prob,entropy", "also print the strata tables, as run --by", NULL, op_by,
     offsetof(report_opts, by), 0, 0, 0, 0, 0},
    OPT_HELP(report_opts),
};

int cmd_report(int argc, char **argv, const char *cmdline)
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
        rc_print_json(&r, argv[optind], -1, NULL);
    else
        rc_print_table(&r, argv[optind], -1, by);
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

int cmd_diff(int argc, char **argv, const char *cmdline)
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
            rc_json_str(stdout, kv[i][1]);
        }
        printf(", \"generation\": {");
        rc_json_num(stdout, "max_abs", g.max_abs, true);
        rc_json_num(stdout, "mean_abs", g.mean_abs, true);
        rc_json_num(stdout, "identical_frac", g.identical, false);
        printf("}, \"lens\": [");
    } else {
        for (int k = 0; k < 2; k++) {
            const rc_results *R = k ? &B : &A;
            printf("%s ", k ? "B" : "A");
            rc_term_str(stdout, k ? pb : pa);
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
                rc_term_str(stdout, v);
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
    /* MoE runs: the tokens whose experts differ between the runs, each side (the sampler's, the trainer's) */
    int64_t rt_tok[2] = {0, 0}, rt_diff[2] = {0, 0};
    const char *rt_none = !A.routing && !B.routing ? "neither run has a routing record"
                          : !A.routing              ? "only B has a routing record"
                          : !B.routing              ? "only A has a routing record"
                                                    : NULL;
    for (int side = 0; !rt_none && side < 2; side++)
        if (rc_routing_compare(A.routing, B.routing, side, &rt_tok[side], &rt_diff[side]) != RC_OK)
            rt_none = rc_last_error();
    if (!json && (A.routing || B.routing)) {
        if (rt_none) {
            printf("routing, A vs B: not compared (%s)\n\n", rt_none);
        } else {
            printf("routing, A vs B: experts differ on");
            for (int side = 0; side < 2; side++)
                printf("%s %lld of %lld %s tokens (%.4g%%)", side ? "," : "", (long long)rt_diff[side],
                       (long long)rt_tok[side], side ? "trainer" : "sampler",
                       rt_tok[side] ? 100.0 * (double)rt_diff[side] / (double)rt_tok[side] : NAN);
            printf("\n\n");
        }
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
                rc_json_num(stdout, "a_mean", sa->mean, true);
                rc_json_num(stdout, "b_mean", sb->mean, true);
                rc_json_num(stdout, "a_std", sa->std, true);
                rc_json_num(stdout, "b_std", sb->std, true);
                rc_json_num(stdout, "a_clipfrac", sa->clipfrac, true);
                rc_json_num(stdout, "b_clipfrac", sb->clipfrac, true);
                rc_json_num(stdout, "a_k3", sa->k3, true);
                rc_json_num(stdout, "b_k3", sb->k3, true);
                rc_json_num(stdout, "a_identical_frac", sa->identical_frac, true);
                rc_json_num(stdout, "b_identical_frac", sb->identical_frac, true);
                rc_json_num(stdout, "forward_max_abs", f.max_abs, true);
                rc_json_num(stdout, "forward_mean_abs", f.mean_abs, true);
                rc_json_num(stdout, "forward_identical_frac", f.identical, false);
                printf("}");
            } else {
                printf("%5lld %11.6f %11.6f %10.3e %10.3e %9.5f %9.5f %9.4f %9.4f  %11.3e %11.3e %9.4f\n", (long long)L,
                       sa->mean, sb->mean, sa->std, sb->std, sa->clipfrac, sb->clipfrac, sa->identical_frac,
                       sb->identical_frac, f.max_abs, f.mean_abs, f.identical);
            }
            shown++;
        }
    if (json) {
        printf("], \"routing\": ");
        if (rt_none) {
            printf("null");
        } else {
            for (int side = 0; side < 2; side++) {
                const char *nm = side ? "trainer" : "sampler";
                printf("%s\"%s_tokens\": %lld, \"%s_tokens_differ\": %lld, ", side ? ", " : "{", nm,
                       (long long)rt_tok[side], nm, (long long)rt_diff[side]);
                char key[32];
                snprintf(key, sizeof key, "%s_share_differ", nm);
                rc_json_num(stdout, key, rt_tok[side] ? (double)rt_diff[side] / (double)rt_tok[side] : NAN, false);
            }
            printf("}");
        }
        printf("}\n");
    } else if (!shown)
        printf("(no length re-scored in both runs)\n");
    rc_results_free(&A);
    rc_results_free(&B);
    return 0;
}
