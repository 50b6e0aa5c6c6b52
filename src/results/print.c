/* The results printed: the run's table, its JSON object, the sweep's rows,
 * the completions with their per-token ratios (ratiocheck run, score, sweep,
 * report). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "print.h"
#include "routing.h"
#include "advice.h"
#include "rc_build_config.h"
#include "util.h"

static void print_show_json(const rc_results *r, const rc_tokenizer *tok, const int64_t *idx, int64_t n);

/* s with control characters and bytes that are not UTF-8 shown as \xNN, so
 * that a file name or a string read from a file cannot drive the terminal */
void rc_term_str(FILE *f, const char *s)
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
void rc_json_str(FILE *f, const char *s)
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

void rc_json_num(FILE *f, const char *key, double v, bool comma)
{
    if (isfinite(v))
        fprintf(f, "\"%s\": %.17g%s", key, v, comma ? ", " : "");
    else
        fprintf(f, "\"%s\": null%s", key, comma ? ", " : "");
}



static bool has_reference(const rc_results *r);
static void print_reference_json(const rc_results *r);
static void print_strata_json(const rc_len_stats *st);

/* the rows of rc_len_fields (stats.c) marked `where` (RC_LF_JSON: RC_LF_JSON_REF too with a
 * reference pass), "key": value joined by ", " */
static void print_len_json(const rc_results *r, const rc_len_stats *st, unsigned where)
{
    const bool ref = where == RC_LF_JSON && has_reference(r);
    bool first = true;
    for (size_t i = 0; i < rc_n_len_fields; i++) {
        const rc_len_field *f = &rc_len_fields[i];
        if (!(f->where & where) && !(ref && (f->where & RC_LF_JSON_REF)))
            continue;
        if (!rc_len_field_present(st, f)) /* no distribution pass, no routing record */
            continue;
        if (!first)
            fputs(", ", stdout);
        first = false;
        if (f->kind == RC_LF_CORRECTIONS) {
            for (size_t k = 0; k < rc_n_corr_stats; k++)
                rc_json_num(stdout, rc_corr_stats[k].name, rc_corr_value(&st->corr, &rc_corr_stats[k]),
                            k + 1 < rc_n_corr_stats);
        } else if (f->kind == RC_LF_STRATA) {
            print_strata_json(st);
        } else if (f->kind == RC_LF_I64) {
            printf("\"%s\": %lld", f->json_key ? f->json_key : f->name, (long long)rc_len_value(st, f));
        } else {
            rc_json_num(stdout, f->json_key ? f->json_key : f->name, rc_len_value(st, f), false);
        }
    }
}

/* "sweep": {"len": L, "rows": [...], "helps_most": the row's name or null} */
static void print_sweep_json(const rc_results *r)
{
    const rc_len_stats *b = rc_results_longest(r);
    printf(", \"sweep\": {\"len\": %lld, \"rows\": [", (long long)r->lens[r->n_lens - 1].len);
    for (int i = 0; i < r->n_sweep; i++) {
        const rc_sweep_row *row = &r->sweep[i];
        printf("%s{\"setting\": ", i ? ", " : "");
        rc_json_str(stdout, row->name);
        printf(", \"sampler\": ");
        rc_json_str(stdout, row->sampler);
        printf(", \"trainer\": ");
        rc_json_str(stdout, row->trainer);
        printf(", \"noise_floor\": %s, \"batch_invariant\": %s, \"skipped\": ", row->noise_floor ? "true" : "false",
               row->invariant ? "true" : "false");
        if (row->res) {
            const rc_len_stats *st = rc_results_longest(row->res);
            printf("null, \"identical_to_base\": %s, ", row->identical ? "true" : "false");
            print_len_json(r, st, RC_LF_SWEEP);
            printf(", ");
            rc_json_num(stdout, "std_vs_base", st->std / b->std, false);
        } else {
            rc_json_str(stdout, row->skipped);
        }
        putchar('}');
    }
    printf("], \"helps_most\": ");
    if (r->sweep_best >= 0)
        rc_json_str(stdout, r->sweep[r->sweep_best].name);
    else
        printf("null");
    printf(", \"helps_most_without_invariant_kernels\": ");
    if (r->sweep_best_other >= 0)
        rc_json_str(stdout, r->sweep[r->sweep_best_other].name);
    else
        printf("null");
    rc_sweep_rec rec[RC_N_OBJECTIVES];
    rc_sweep_recommend(r, rec);
    printf(", \"recommended\": {");
    for (int o = 0, first = 1; o < RC_N_OBJECTIVES; o++) {
        const rc_sweep_rec *e = &rec[o];
        if (r->verdict.level[o] == RC_VERDICT_NONE) /* no such line (routing without a MoE layer) */
            continue;
        printf("%s\"%s\": {\"metric\": ", first ? "" : ", ", rc_objectives[o].name);
        first = 0;
        rc_json_str(stdout, e->metric);
        printf(", ");
        rc_json_num(stdout, "base", e->base, true);
        rc_json_num(stdout, "noise_floor", e->noise, true);
        printf("\"settings\": [");
        for (int k = 0; k < e->n; k++) {
            printf("%s{\"setting\": ", k ? ", " : "");
            rc_json_str(stdout, r->sweep[e->row[k]].name);
            printf(", ");
            rc_json_num(stdout, "value", e->value[k], true);
            rc_json_num(stdout, "effect", e->value[k] - e->base, false);
            putchar('}');
        }
        printf("]}");
    }
    printf("}}");
}

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
                rc_json_num(stdout, rc_stratum_fields[f].name, rc_stratum_value(&sa->bin[b], &rc_stratum_fields[f]),
                         f + 1 < rc_n_stratum_fields);
            printf("}");
        }
        printf("]}");
    }
    printf("}");
}

/* "growth": var(S) against L and its fit (README "Growth") */
static void print_growth_json(const rc_growth *g)
{
    printf("\"growth\": {\"points\": %d, ", g->n_points);
    rc_json_num(stdout, "exponent", g->exponent, true);
    rc_json_num(stdout, "log_coef", g->log_coef, true);
    rc_json_num(stdout, "r2", g->r2, true);
    printf("\"looks_like\": ");
    rc_json_str(stdout, g->looks_like);
    printf(", ");
    rc_json_num(stdout, "cap", g->cap, true);
    rc_json_num(stdout, "cap_length", g->cap_length, true);
    printf("\"reason\": ");
    rc_json_str(stdout, g->reason);
    printf("}");
}

/* the run had a reference pass (a chunked score holds its statistics, not its tensor) */
static bool has_reference(const rc_results *r)
{
    return r->logprob_ref || !strcmp(r->reference, "fp32") || !strcmp(r->reference, "fp64");
}

void rc_print_json(const rc_results *r, const char *out_path, int gates, const rc_show_sel *show)
{
    for (size_t i = 0; i < rc_n_settings; i++) { /* the run's settings (results.h), in their order */
        const rc_setting *set = &rc_settings[i];
        const char *at = (const char *)r + set->off;
        if (!set->json_key)
            continue;
        printf("%s\"%s\": ", i ? ", " : "{", set->json_key);
        switch (set->kind) {
        case RC_SET_TEXT: rc_json_str(stdout, rc_setting_text(r, set)); break;
        case RC_SET_I64: printf("%lld", (long long)*(const int64_t *)(const void *)at); break;
        case RC_SET_F64: printf("%.17g", *(const double *)(const void *)at); break;
        case RC_SET_BOOL: fputs(*(const bool *)(const void *)at ? "true" : "false", stdout); break;
        }
    }
    printf(", \"prompts\": %lld, \"sequences\": %lld, \"output\": ", (long long)r->n_prompts, (long long)r->n_seq);
    if (out_path)
        rc_json_str(stdout, out_path);
    else
        printf("null");
    printf(", \"lens\": [");
    for (int i = 0; i < r->n_lens; i++) {
        const rc_len_stats *st = &r->lens[i].st;
        printf("%s{\"len\": %lld, ", i ? ", " : "", (long long)r->lens[i].len);
        print_len_json(r, st, RC_LF_JSON);
        putchar('}');
    }
    printf("], \"cross_length\": [");
    for (int i = 0; i < r->n_cross; i++) {
        const rc_cross_len *c = &r->cross[i];
        printf("%s{\"len_a\": %lld, \"len_b\": %lld, \"count\": %lld, ", i ? ", " : "", (long long)c->len_a,
               (long long)c->len_b, (long long)c->count);
        rc_json_num(stdout, "max_abs", c->max_abs, true);
        rc_json_num(stdout, "mean_abs", c->mean_abs, false);
        printf("}");
    }
    printf("], ");
    print_growth_json(&r->growth);
    const rc_verdict *v = &r->verdict;
    printf(", \"verdict\": {");
    for (int o = 0; o < RC_N_OBJECTIVES; o++) {
        if (v->level[o] == RC_VERDICT_NONE) /* no such line (routing without a MoE layer) */
            continue;
        printf("\"%s\": {\"level\": \"%s\", \"reason\": ", rc_objectives[o].name, rc_verdict_name(v->level[o]));
        rc_json_str(stdout, v->reason[o]);
        char next[320];
        rc_verdict_next_step(r, o, next, sizeof next);
        printf(", \"next_step\": ");
        rc_json_str(stdout, next);
        if (o == RC_OBJ_SEQUENCE_IS) { /* each published sequence-level correction on both bounds, worst length */
            printf(", \"corrections\": [");
            for (int k = 0; k < RC_N_SEQ_CORR; k++) {
                double lo = 0, hi = 0;
                for (int i = 0; i < r->n_lens; i++)
                    if (r->lens[i].st.seq_corr_below[k] + r->lens[i].st.seq_corr_above[k] > lo + hi) {
                        lo = r->lens[i].st.seq_corr_below[k];
                        hi = r->lens[i].st.seq_corr_above[k];
                    }
                printf("%s{\"name\": ", k ? ", " : "");
                rc_json_str(stdout, rc_seq_corrs[k].name);
                printf(", \"of\": \"%s\", ", rc_seq_corrs[k].of);
                rc_json_num(stdout, "low", rc_seq_corrs[k].lo, true);
                rc_json_num(stdout, "high", rc_seq_corrs[k].hi > 0 ? rc_seq_corrs[k].hi : r->stat.seq_cap, true);
                rc_json_num(stdout, "frac_below", lo, true);
                rc_json_num(stdout, "frac_above", hi, false);
                putchar('}');
            }
            putchar(']');
        }
        printf("}, ");
    }
    print_reference_json(r);
    printf("\"len\": %lld, \"worst_token\": {\"sequence\": %lld, \"position\": %lld, ", (long long)v->len,
           (long long)v->worst_token_seq, (long long)v->worst_token_pos);
    rc_json_num(stdout, "ratio", v->worst_token_ratio, false);
    printf("}, \"worst_sequence\": {\"sequence\": %lld, ", (long long)v->worst_seq);
    rc_json_num(stdout, "seq_ratio", v->worst_seq_ratio, false);
    printf("}}");
    if (r->threeway) { /* score's three columns (docs/score.md "Three columns") */
        const rc_threeway *t = r->threeway;
        printf(", \"three_columns\": {\"len\": %lld, \"ratiocheck\": ", (long long)t->len);
        rc_json_str(stdout, t->ratiocheck);
        printf(", \"off\": \"%s\", \"summary\": ", rc_tw_off_names[t->off]);
        rc_json_str(stdout, t->summary);
        for (int k = 0; k < RC_TW_N; k++) {
            const rc_pair_stats *p = &t->pair[k];
            printf(", \"%s\": {\"count\": %lld, ", rc_threeway_names[k], (long long)p->count);
            rc_json_num(stdout, "mean", p->mean, true);
            rc_json_num(stdout, "std", p->std, true);
            rc_json_num(stdout, "mean_abs", p->mean_abs, true);
            rc_json_num(stdout, "max_abs", p->max_abs, true);
            rc_json_num(stdout, "k3", p->k3, true);
            rc_json_num(stdout, "mult_prob_err", p->mult_prob_err, true);
            rc_json_num(stdout, "identical_frac", p->identical_frac, false);
            printf("}");
        }
        if (t->ref[0]) {
            printf(", \"reference\": {\"name\": \"%s\", \"count\": %lld", t->ref, (long long)t->ref_count);
            for (int k = 0; k < RC_TW_COLS; k++) {
                printf(", \"%s\": {", rc_threeway_cols[k]);
                rc_json_num(stdout, "mean_abs", t->ref_mean_abs[k], true);
                rc_json_num(stdout, "max_abs", t->ref_max_abs[k], false);
                printf("}");
            }
            printf("}");
        } else {
            printf(", \"reference\": null");
        }
        printf("}");
    }
    if (gates >= 0) {
        printf(", \"gates\": \"%s\", \"gate_rules\": ", gates ? "FAIL" : "PASS");
        rc_json_str(stdout, r->gate_rules);
        printf(", \"gate_failed\": ");
        rc_json_str(stdout, r->gate_failed);
    }
    if (r->routing)
        rc_routing_print_json(r->routing);
    if (r->n_sweep > 0)
        print_sweep_json(r);
    if (show && show->idx)
        print_show_json(r, show->tok, show->idx, show->n);
    printf(", \"seconds_generate\": %.3f, \"seconds_forward\": %.3f, \"seconds_reference\": %.3f, \"seconds\": %.3f}\n",
           r->seconds_generate, r->seconds_forward, r->seconds_reference, r->seconds_total);
}

/* The columns of one of the run's tables (RC_LF_TAB_*) from rc_len_fields:
 * the headers (st NULL) or one length's cells, each after a space. */
static void print_columns(const rc_results *r, int table, const rc_len_stats *st)
{
    for (int pos = 1;; pos++) {
        const rc_len_field *f = NULL;
        const rc_len_column *c = NULL;
        for (size_t i = 0; i < rc_n_len_fields && !f; i++)
            for (int k = 0; k < 2; k++)
                if (rc_len_fields[i].col[k].table == table && rc_len_fields[i].col[k].pos == pos) {
                    f = &rc_len_fields[i];
                    c = &f->col[k];
                }
        if (!f)
            return;
        const rc_len_stats *base = table == RC_LF_TAB_SWEEP ? rc_results_longest(r) : NULL;
        if (base && !rc_len_field_present(base, f)) /* a sweep column the base has no values for */
            continue;
        const int width = atoi(c->fmt + 1);
        char cell[64];
        if (!st) {
            double param;
            memcpy(&param, (const char *)&r->stat + c->param_off, sizeof param);
            const char *g = strstr(c->label, "%g");
            if (g)
                snprintf(cell, sizeof cell, "%.*s%g%s", (int)(g - c->label), c->label, param, g + 2);
            else
                snprintf(cell, sizeof cell, "%s", c->label);
            printf(" %*s", width, cell);
            continue;
        }
        const double v = rc_len_value(st, f);
        if (c->fmt[strlen(c->fmt) - 1] == 's') { /* a position: "at N", or none */
            if (v < 0)
                snprintf(cell, sizeof cell, "none");
            else
                snprintf(cell, sizeof cell, "at %lld", (long long)v);
            printf(" %*s", width, cell);
        } else if (f->kind == RC_LF_I64) {
            printf(" %*lld", width, (long long)v);
        } else {
            const char conv = c->fmt[strlen(c->fmt) - 1];
            const char *dot = strchr(c->fmt, '.');
            const int prec = dot ? atoi(dot + 1) : 6;
            if (conv == 'e')
                printf(" %*.*e", width, prec, v);
            else
                printf(" %*.*f", width, prec, v);
        }
    }
}

/* the run's k3 and mean |log r| (at their worst length) beside the bands
 * published stacks report (advice.h) */
static double ref_value(const rc_results *r, rc_ref_metric m)
{
    double w = NAN;
    for (int i = 0; i < r->n_lens; i++) {
        const double x = m == RC_REF_K3 ? r->lens[i].st.k3 : r->lens[i].st.corr.mean_abs_log_ratio;
        w = isnan(w) || x > w ? x : w;
    }
    return w;
}

static void print_reference_bands(const rc_results *r)
{
    static const char *const label[2] = {"k3", "mean |log r|"};
    for (int m = 0; m < 2; m++) {
        const double x = ref_value(r, (rc_ref_metric)m);
        printf("  %-12s %.2g: ", label[m], x);
        bool first = true;
        for (size_t i = 0; i < rc_n_ref_bands; i++) {
            if (rc_ref_bands[i].metric != (rc_ref_metric)m)
                continue;
            char t[160];
            rc_ref_band_text(&rc_ref_bands[i], x, t, sizeof t);
            printf("%s%s", first ? "" : "; ", t);
            first = false;
        }
        putchar('\n');
    }
}

static void print_reference_json(const rc_results *r)
{
    printf("\"reference_bands\": [");
    for (size_t i = 0; i < rc_n_ref_bands; i++) {
        const rc_ref_band *b = &rc_ref_bands[i];
        const double x = ref_value(r, b->metric);
        const int p = rc_ref_band_position(b, x);
        printf("%s{\"metric\": \"%s\", \"setting\": ", i ? ", " : "", rc_ref_metric_names[b->metric]);
        rc_json_str(stdout, b->setting);
        printf(", ");
        rc_json_num(stdout, "value", x, true);
        rc_json_num(stdout, "low", b->lo, true);
        rc_json_num(stdout, "high", b->hi, true);
        printf("\"position\": \"%s\", \"sources\": ", p < 0 ? "below" : p == 0 ? "within" : p == 1 ? "above" : "n/a");
        rc_json_str(stdout, b->sources);
        putchar('}');
    }
    printf("], ");
}

/* `ratiocheck sweep`: one row per setting at the longest length, and the
 * setting that lowers k3 the most */
static void print_sweep_table(const rc_results *r)
{
    const rc_len_stats *b = rc_results_longest(r);
    printf("\nsweep: the same %lld rollouts replayed, one setting changed from the base (L=%lld; std vs base: "
           "ratio of the stds)\n",
           (long long)r->n_seq, (long long)r->lens[r->n_lens - 1].len);
    printf("%-34s", "setting");
    print_columns(r, RC_LF_TAB_SWEEP, NULL);
    printf(" %11s\n", "std vs base");
    printf("%-34s", "base");
    print_columns(r, RC_LF_TAB_SWEEP, b);
    printf(" %11s\n", "1");
    for (int i = 0; i < r->n_sweep; i++) {
        const rc_sweep_row *row = &r->sweep[i];
        const char *name = row->name;
        if (!row->res) {
            printf("%-34s skipped: ", name);
            rc_term_str(stdout, row->skipped);
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
        printf("%-34s", name);
        print_columns(r, RC_LF_TAB_SWEEP, st);
        printf(" %11s\n", rel);
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
    rc_sweep_rec rec[RC_N_OBJECTIVES];
    rc_sweep_recommend(r, rec);
    printf("recommended per objective (the settings that lower its metric by more than the noise floor, 2 standard "
           "errors over the sequences%s; best first):\n",
           r->verdict.level[RC_OBJ_ROUTING] != RC_VERDICT_NONE ? " (routing's: over the routing record's tokens)" : "");
    for (int o = 0; o < RC_N_OBJECTIVES; o++) {
        const rc_sweep_rec *e = &rec[o];
        if (r->verdict.level[o] == RC_VERDICT_NONE) /* no such line (routing without a MoE layer) */
            continue;
        printf("  %-12s %s %.3g (noise floor %.2g): ", rc_objectives[o].label, e->metric, e->base, e->noise);
        if (!(e->base > 0))
            printf("nothing to reduce\n");
        else if (e->n == 0)
            printf("no setting lowers it past the noise floor\n");
        for (int k = 0; k < e->n; k++)
            printf("%s%d. %s -> %.3g (%+.3g)%s", k ? "; " : "", k + 1, r->sweep[e->row[k]].name, e->value[k],
                   e->value[k] - e->base, k + 1 == e->n ? "\n" : "");
    }
}

/* --distribution: the two sides' whole next-token distributions, per length
 * (only the lengths that have the pass) */
static void print_distribution(const rc_results *r)
{
    bool any = false;
    for (int i = 0; i < r->n_lens; i++)
        any = any || r->lens[i].st.dist;
    if (!any)
        return;
    printf("\nwhole distribution per token: KL(sampler || trainer) and total variation over the full vocabulary "
           "(fp64),\ntop-1 agree: the two sides' argmax is the same token\n");
    printf("%5s", "L");
    print_columns(r, RC_LF_TAB_DIST, NULL);
    putchar('\n');
    for (int i = 0; i < r->n_lens; i++) {
        if (!r->lens[i].st.dist)
            continue;
        printf("%5lld", (long long)r->lens[i].len);
        print_columns(r, RC_LF_TAB_DIST, &r->lens[i].st);
        putchar('\n');
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

void rc_print_table(const rc_results *r, const char *out_path, int gates, unsigned by)
{
    printf("ratiocheck %s  model ", RC_VERSION);
    rc_term_str(stdout, r->model_path ? r->model_path : "");
    if (r->model_type[0]) { /* score with both sides logged: no model, no type */
        fputs(" (", stdout);
        rc_term_str(stdout, r->model_type);
        fputs(")", stdout);
    }
    /* a score run's sequences are the file's rollouts, each its own prompt (its sampler is "logged (...)"):
     * nothing is generated or sampled, and the trainer's side is the only computed one */
    const bool logged = !strncmp(r->sampler, "logged (", 8);
    /* the settings the header shows, from the one settings table (stats.c) */
    for (size_t i = 0; i < rc_n_settings; i++) {
        const rc_setting *s = &rc_settings[i];
        if (!s->table_label)
            continue;
        if (logged && r->trainer[0] && (!strcmp(s->name, "dtype") || !strcmp(s->name, "kernels") ||
                                        !strcmp(s->name, "upcast") || !strcmp(s->name, "logprob_dtype")))
            continue; /* the base settings, not the trainer's: its spec below says them */
        const char *v = rc_setting_text(r, s);
        if (!v[0] || (s->table_hide && strcmp(v, s->table_hide) == 0))
            continue;
        printf("  %s ", s->table_label);
        rc_term_str(stdout, v);
    }
    putchar('\n');
    if (r->device[0]) {
        printf("backend ");
        rc_term_str(stdout, r->backend);
        printf(": ");
        rc_term_str(stdout, r->device);
        if (r->gpu_split[0]) {
            printf(", ");
            rc_term_str(stdout, r->gpu_split);
        }
        putchar('\n');
    }
    if (logged) /* the file's temperature, top-k and top-p: in the sampler's text */
        printf("%lld rollouts\n\n", (long long)r->n_seq);
    else
        printf("%lld sequences (%lld prompts x %lld samples), temperature %g, top-k %lld, top-p %g, seed %lld\n\n",
               (long long)r->n_seq, (long long)r->n_prompts, (long long)r->samples, r->temperature,
               (long long)r->top_k, r->top_p, (long long)r->seed);
    printf("ratio = exp(forward - generation) per generated token; clipfrac: ratio outside [%g, %g]\n",
           1.0 - r->stat.clip_eps_low, 1.0 + r->stat.clip_eps_high);
    printf("%5s", "L");
    print_columns(r, RC_LF_TAB_TOKENS, NULL);
    putchar('\n');
    for (int i = 0; i < r->n_lens; i++) {
        printf("%5lld", (long long)r->lens[i].len);
        print_columns(r, RC_LF_TAB_TOKENS, &r->lens[i].st);
        putchar('\n');
    }
    printf("identical: tokens whose two log-probs are bitwise equal; first div: the first generated position "
           "(0-based) where any\nsequence's two log-probs differ, none when every one is equal\n");
    if (r->n_lens > 0) { /* the first generated token on its own line: its sampler log-prob is the prefill's */
        const rc_len_stats *st = &r->lens[r->n_lens - 1].st;
        printf("first generated token (the sampler's log-prob from the prefill, the later ones from decode steps), "
               "L=%lld:\n  %lld tokens, mean |log r| %.3e (later tokens %.3e", (long long)r->lens[r->n_lens - 1].len,
               (long long)st->first_count, st->first_mean_abs_log_ratio, st->later_mean_abs_log_ratio);
        if (st->later_mean_abs_log_ratio > 0 && st->first_count > 0)
            printf(", %.2fx", st->first_mean_abs_log_ratio / st->later_mean_abs_log_ratio);
        printf("), max |log r| %.3e, k3 %.3e\n", st->first_max_abs_log_ratio, st->first_k3);
    }
    printf("\nper sequence: S = sum of log ratio over its tokens (sequence ratio e^S), M = S / tokens (GSPO's "
           "e^M)\n");
    printf("%5s", "L");
    print_columns(r, RC_LF_TAB_SEQS, NULL);
    putchar('\n');
    for (int i = 0; i < r->n_lens; i++) {
        printf("%5lld", (long long)r->lens[i].len);
        print_columns(r, RC_LF_TAB_SEQS, &r->lens[i].st);
        putchar('\n');
    }
    print_distribution(r);
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
    if (r->threeway) { /* score's three columns (docs/score.md "Three columns") */
        const rc_threeway *t = r->threeway;
        printf("\nthree columns: the sampler and your trainer as logged, ratiocheck's trainer (");
        rc_term_str(stdout, t->ratiocheck);
        printf(");\nd = b - a per token, tokens t < %lld (docs/score.md \"Three columns\")\n", (long long)t->len);
        printf("  %-28s %7s %11s %11s %11s %11s %10s %9s\n", "a vs b", "tokens", "mean d", "std d", "mean |d|",
               "max |d|", "k3", "identical");
        for (int k = 0; k < RC_TW_N; k++) {
            const rc_pair_stats *p = &t->pair[k];
            printf("  %-28s %7lld %11.3e %11.3e %11.3e %11.3e %10.3e %9.4f\n", rc_threeway_labels[k],
                   (long long)p->count, p->mean, p->std, p->mean_abs, p->max_abs, p->k3, p->identical_frac);
        }
        if (t->ref[0])
            printf("  |column - %s reference|, mean / max: sampler %.3e / %.3e, your trainer %.3e / %.3e, ratiocheck "
                   "%.3e / %.3e\n", t->ref, t->ref_mean_abs[0], t->ref_max_abs[0], t->ref_mean_abs[1],
                   t->ref_max_abs[1], t->ref_mean_abs[2], t->ref_max_abs[2]);
        printf("  ");
        rc_term_str(stdout, t->summary);
        printf("\n");
    }
    const rc_verdict *v = &r->verdict;
    printf("\nverdict (docs/verdict.md: each gate and band with its source)\n");
    for (int o = 0; o < RC_N_OBJECTIVES; o++) {
        if (v->level[o] == RC_VERDICT_NONE) /* no such line (routing without a MoE layer) */
            continue;
        printf("  %-12s %-4s  %s\n", rc_objectives[o].label, rc_verdict_name(v->level[o]), v->reason[o]);
        char next[320];
        rc_verdict_next_step(r, o, next, sizeof next);
        if (next[0])
            printf("  %-12s       %s\n", "", next);
    }
    print_reference_bands(r);
    if (v->worst_token_seq >= 0 && v->worst_token_ratio == 1.0)
        printf("  every ratio is exactly 1\n");
    else if (v->worst_token_seq >= 0)
        printf("  worst token: sequence %lld, position %lld, ratio %.6g; worst sequence: %lld, e^S %.6g (L=%lld, "
               "0-based)\n",
               (long long)v->worst_token_seq, (long long)v->worst_token_pos, v->worst_token_ratio,
               (long long)v->worst_seq, v->worst_seq_ratio, (long long)v->len);
    if (r->routing)
        rc_routing_print(r->routing);
    if (gates >= 0) {
        const char *on = strstr(r->gate_rules, "--fail-on ");
        const bool above = strstr(r->gate_rules, "--fail-above ") != NULL;
        printf("gates (%s%s%s): %s\n", above ? "--fail-above" : "", above && on ? ", " : "", on ? on : "",
               gates ? "FAIL (what failed is on stderr)" : "PASS");
    }
    if (r->n_sweep > 0)
        print_sweep_table(r);
    double swept = 0; /* a sweep's settings, when their results are at hand */
    for (int i = 0; i < r->n_sweep; i++)
        swept += r->sweep[i].res ? r->sweep[i].res->seconds_total : 0;
    if (swept > 0)
        printf("\nsweep: %.1f s in all, the base run %.1f s and %d settings %.1f s\n", r->seconds_total + swept,
               r->seconds_total, r->n_sweep, swept);
    if (logged && !r->model_type[0])
        printf("\n%.1f s (both sides logged: no forward", r->seconds_total);
    else if (logged)
        printf("\n%.1f s (re-scoring %.1f s", r->seconds_total, r->seconds_forward);
    else
        printf("\n%.1f s (generation %.1f s, re-scoring %.1f s", r->seconds_total, r->seconds_generate,
               r->seconds_forward);
    if (r->seconds_reference > 0)
        printf(", %s reference %.1f s", r->reference, r->seconds_reference);
    printf(")%s", out_path ? ", written to " : "");
    rc_term_str(stdout, out_path ? out_path : "");
    putchar('\n');
}

/* --show N / --show-worst N: which sequences, in order: the first N, or the
 * N with the largest |S| (sum of log r at the longest length), largest first */
int64_t *rc_show_pick(const rc_results *r, int64_t first, int64_t worst, int64_t *n_out)
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
void rc_print_show(const rc_results *r, const rc_tokenizer *tok, const int64_t *idx, int64_t n, bool worst_first)
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
            rc_json_str(stdout, r->prompt_text[p]);
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
        rc_json_num(stdout, "seq_log_ratio_sum", L->seq_log_ratio_sum[q], true);
        printf("\"tokens\": [");
        for (int64_t t = 0; t < valid; t++)
            printf("%s%d", t ? ", " : "", r->gen_tokens[q * r->gen_len + t]);
        printf("], \"pieces\": [");
        for (int64_t t = 0; t < valid; t++) {
            int32_t id = r->gen_tokens[q * r->gen_len + t];
            char *piece = NULL;
            if (tok && rc_tokenizer_decode(tok, &id, 1, false, &piece, NULL) == RC_OK && piece) {
                printf("%s", t ? ", " : "");
                rc_json_str(stdout, piece);
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
