/* h5contents.c: the contents of a ratiocheck results file (h5out.c's
 * format description): the root attributes, /prompts, /rollouts,
 * /reference, each /len_NNNN, /cross, /growth, /verdict, /threeway, /sweep
 * and /trace, written by write_all into an open file (h5w.h). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5w.h"
#include "results.h"
#include "status.h"
#include "trace_out.h"
#include "util.h"

#define FORMAT_NAME "ratiocheck-results"
#define FORMAT_VERSION 1

rc_status write_root_attrs(const h5w *w, const rc_results *r)
{
    const hid_t f = w->file;
    const char *o = "/";
    RC_TRY(attr_str(w, f, o, "format", FORMAT_NAME));
    RC_TRY(attr_i64(w, f, o, "format_version", FORMAT_VERSION));
    for (size_t i = 0; i < rc_n_settings; i++) { /* the run's settings (results.h) */
        const rc_setting *set = &rc_settings[i];
        const char *at = (const char *)r + set->off;
        switch (set->kind) {
        case RC_SET_TEXT: RC_TRY(attr_str(w, f, o, set->name, rc_setting_text(r, set))); break;
        case RC_SET_I64: RC_TRY(attr_i64(w, f, o, set->name, *(const int64_t *)(const void *)at)); break;
        case RC_SET_F64: RC_TRY(attr_f64(w, f, o, set->name, *(const double *)(const void *)at)); break;
        case RC_SET_BOOL: RC_TRY(attr_i64(w, f, o, set->name, *(const bool *)(const void *)at ? 1 : 0)); break;
        }
    }

    int64_t *lens = NULL;
    RC_TRY(rc_calloc((void **)&lens, r->n_lens, sizeof *lens, "lengths attribute"));
    for (int i = 0; i < r->n_lens; i++)
        lens[i] = r->lens[i].len;
    rc_status st = attr_num(w, f, o, "lengths", H5T_STD_I64LE, H5T_NATIVE_INT64, r->n_lens, lens);
    free(lens);
    RC_TRY(st);

    RC_TRY(attr_f64(w, f, o, "seconds_generate", r->seconds_generate));
    RC_TRY(attr_f64(w, f, o, "seconds_forward", r->seconds_forward));
    RC_TRY(attr_f64(w, f, o, "seconds_total", r->seconds_total));
    RC_TRY(attr_f64(w, f, o, "seconds_reference", r->seconds_reference));
    return RC_OK;
}

static rc_status write_prompts(const h5w *w, const rc_results *r)
{
    const char *o = "/prompts";
    hid_t g;
    RC_TRY(group_create(w, o, &g));
    rc_status st = ds_i32_2d(w, g, o, "tokens", r->n_prompts, r->prompt_max, r->prompt_tokens);
    if (st == RC_OK)
        st = ds_i32_1d(w, g, o, "lengths", r->n_prompts, r->prompt_len);
    if (st == RC_OK && r->prompt_text)
        st = ds_str_1d(w, g, o, "text", r->n_prompts, r->prompt_text);
    return group_close(w, g, o, st);
}

static rc_status write_rollouts(const h5w *w, const rc_results *r)
{
    const char *o = "/rollouts";
    hid_t g;
    RC_TRY(group_create(w, o, &g));
    rc_status st = ds_i32_1d(w, g, o, "prompt_index", r->n_seq, r->seq_prompt);
    if (st == RC_OK)
        st = ds_i32_1d(w, g, o, "sample_index", r->n_seq, r->seq_sample);
    if (st == RC_OK)
        st = ds_i32_2d(w, g, o, "tokens", r->n_seq, r->gen_len, r->gen_tokens);
    if (st == RC_OK)
        st = ds_i32_1d(w, g, o, "lengths", r->n_seq, r->gen_valid);
    if (st == RC_OK)
        st = ds_f32_2d(w, g, o, "logprob_gen", r->n_seq, r->gen_len, r->logprob_gen);
    if (st == RC_OK)
        st = ds_f32_2d(w, g, o, "logprob_gen_processed", r->n_seq, r->gen_len,
                       r->logprob_gen_processed);
    if (st == RC_OK && r->logprob_trainer)
        st = ds_f32_2d(w, g, o, "logprob_trainer", r->n_seq, r->gen_len, r->logprob_trainer);
    if (st == RC_OK && r->logprob_ratiocheck)
        st = ds_f32_2d(w, g, o, "logprob_ratiocheck", r->n_seq, r->gen_len, r->logprob_ratiocheck);
    if (st == RC_OK && r->entropy_gen)
        st = ds_f32_2d(w, g, o, "entropy", r->n_seq, r->gen_len, r->entropy_gen);
    if (st == RC_OK && r->completion)
        st = ds_str_1d(w, g, o, "completion", r->n_seq, r->completion);
    return group_close(w, g, o, st);
}

static rc_status write_reference(const h5w *w, const rc_results *r)
{
    if (!r->logprob_ref)
        return RC_OK;
    const char *o = "/reference";
    hid_t g;
    RC_TRY(group_create(w, o, &g));
    rc_status st = ds_f64_2d(w, g, o, "logprob", r->n_seq, r->gen_len, r->logprob_ref);
    return group_close(w, g, o, st);
}

/* /len_NNNN's attributes: every RC_LF_H5 row of rc_len_fields (stats.c) in
 * the order of h5_pos, the corrections under their names where the table
 * places them */
rc_status write_len_attrs(const h5w *w, hid_t g, const char *o, const rc_len_result *lr)
{
    const rc_len_stats *s = &lr->st;
    RC_TRY(attr_i64(w, g, o, "len", lr->len));
    for (int pos = 1;; pos++) {
        const rc_len_field *f = NULL;
        for (size_t i = 0; i < rc_n_len_fields && !f; i++)
            if ((rc_len_fields[i].where & RC_LF_H5) && rc_len_fields[i].h5_pos == pos)
                f = &rc_len_fields[i];
        if (!f)
            break;
        if (!rc_len_field_present(s, f)) /* no distribution pass, no routing record */
            continue;
        if (f->kind == RC_LF_CORRECTIONS) {
            for (size_t k = 0; k < rc_n_corr_stats; k++)
                RC_TRY(attr_f64(w, g, o, rc_corr_stats[k].name, rc_corr_value(&s->corr, &rc_corr_stats[k])));
        } else if (f->kind == RC_LF_I64) {
            int64_t v;
            memcpy(&v, (const char *)s + f->off, sizeof v);
            RC_TRY(attr_i64(w, g, o, f->name, v));
        } else {
            RC_TRY(attr_f64(w, g, o, f->name, rc_len_value(s, f)));
        }
    }
    return RC_OK;
}

/* /len_NNNN/strata/{prob,entropy}: the deciles of results.h rc_strata (a
 * kind without values, entropy in a replayed older file, is left out) */
rc_status write_strata(const h5w *w, const char *len_obj, const rc_len_stats *s)
{
    char o[96];
    snprintf(o, sizeof o, "%s/strata", len_obj);
    hid_t g;
    RC_TRY(group_create(w, o, &g));
    rc_status st = group_close(w, g, o, RC_OK);
    for (int k = 0; k < RC_N_STRATA && st == RC_OK; k++) {
        const rc_strata *sa = &s->strata[k];
        if (!sa->present)
            continue;
        char ko[128];
        snprintf(ko, sizeof ko, "%s/%s", o, rc_strata_names[k]);
        RC_TRY(group_create(w, ko, &g));
        int64_t cnt[RC_N_DECILES];
        double v[RC_N_DECILES];
        st = attr_i64(w, g, ko, "count", sa->count);
        if (st == RC_OK)
            st = attr_num(w, g, ko, "edges", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, RC_N_DECILES - 1, sa->edges);
        for (int b = 0; b < RC_N_DECILES; b++)
            cnt[b] = sa->bin[b].count;
        if (st == RC_OK)
            st = ds_i64_1d(w, g, ko, "count", RC_N_DECILES, cnt);
        for (size_t f = 0; f < rc_n_stratum_fields && st == RC_OK; f++) {
            for (int b = 0; b < RC_N_DECILES; b++)
                v[b] = rc_stratum_value(&sa->bin[b], &rc_stratum_fields[f]);
            st = ds_f64_1d(w, g, ko, rc_stratum_fields[f].name, RC_N_DECILES, v);
        }
        st = group_close(w, g, ko, st);
    }
    return st;
}

/* One /len_NNNN group. buf holds at least n_seq * L floats. */
/* out[s, t] = the ratio exp(fwd - gen) (log_ratio: fwd - gen) of n sequences
 * at t < L, fwd [n, L], gen [n, G]; NaN where either is */
void ratio_rows(const float *fwd, const float *gen, int64_t n, int64_t L, int64_t G, bool log_ratio, float *out)
{
    for (int64_t s = 0; s < n; s++)
        for (int64_t t = 0; t < L; t++) {
            const float f = fwd[s * L + t], g = gen[s * G + t];
            out[s * L + t] = (isnan(f) || isnan(g)) ? NAN : log_ratio ? f - g : (float)exp((double)f - (double)g);
        }
}

/* a length's per-position arrays [L] into its open group g (named o) */
rc_status write_pos_arrays(const h5w *w, hid_t g, const char *o, const rc_len_result *lr)
{
    const int64_t L = lr->len;
    rc_status st = ds_i64_1d(w, g, o, "pos_count", L, lr->pos_count);
    if (st == RC_OK)
        st = ds_f64_1d(w, g, o, "pos_mean_abs_log_ratio", L, lr->pos_mean_abs_log_ratio);
    if (st == RC_OK)
        st = ds_f64_1d(w, g, o, "pos_max_abs_log_ratio", L, lr->pos_max_abs_log_ratio);
    return st == RC_OK ? ds_f64_1d(w, g, o, "pos_ratio_std", L, lr->pos_ratio_std) : st;
}

/* --distribution: a length's per-token and per-position arrays */
static rc_status write_dist(const h5w *w, hid_t g, const char *o, const rc_len_result *lr, int64_t S)
{
    const int64_t L = lr->len;
    rc_status st = ds_f64_2d(w, g, o, "kl", S, L, lr->dist_kl);
    if (st == RC_OK)
        st = ds_f64_2d(w, g, o, "tv", S, L, lr->dist_tv);
    if (st == RC_OK)
        st = ds_i32_2d(w, g, o, "top1_agree", S, L, lr->dist_top1);
    if (st == RC_OK)
        st = ds_f64_1d(w, g, o, "pos_kl_mean", L, lr->pos_kl_mean);
    if (st == RC_OK)
        st = ds_f64_1d(w, g, o, "pos_tv_mean", L, lr->pos_tv_mean);
    return st == RC_OK ? ds_f64_1d(w, g, o, "pos_top1_agree", L, lr->pos_top1_agree) : st;
}

static rc_status write_len(const h5w *w, const rc_results *r, const rc_len_result *lr, float *buf)
{
    char o[64];
    snprintf(o, sizeof o, "/len_%04lld", (long long)lr->len);
    const int64_t L = lr->len, S = r->n_seq, T = r->gen_len;
    hid_t g;
    RC_TRY(group_create(w, o, &g));
    rc_status st = write_len_attrs(w, g, o, lr);
    if (st == RC_OK)
        st = ds_f32_2d(w, g, o, "logprob_forward", S, L, lr->logprob_fwd);
    if (st == RC_OK) {
        ratio_rows(lr->logprob_fwd, r->logprob_gen, S, L, T, false, buf);
        st = ds_f32_2d(w, g, o, "ratio", S, L, buf);
    }
    if (st == RC_OK) {
        ratio_rows(lr->logprob_fwd, r->logprob_gen, S, L, T, true, buf);
        st = ds_f32_2d(w, g, o, "log_ratio", S, L, buf);
    }
    if (st == RC_OK)
        st = write_pos_arrays(w, g, o, lr);
    if (st == RC_OK)
        st = ds_f64_1d(w, g, o, "seq_log_ratio_sum", S, lr->seq_log_ratio_sum);
    if (st == RC_OK)
        st = ds_f64_1d(w, g, o, "seq_log_ratio_mean", S, lr->seq_log_ratio_mean);
    if (st == RC_OK && lr->st.dist)
        st = write_dist(w, g, o, lr, S);
    st = group_close(w, g, o, st);
    return st == RC_OK ? write_strata(w, o, &lr->st) : st;
}

rc_status write_cross(const h5w *w, const rc_results *r)
{
    const char *o = "/cross_length";
    const int64_t n = r->n_cross;
    int64_t *ia = NULL, *ib = NULL, *cnt = NULL;
    double *mx = NULL, *mn = NULL;
    rc_status st = rc_calloc((void **)&ia, n, sizeof *ia, "cross_length");
    if (st == RC_OK)
        st = rc_calloc((void **)&ib, n, sizeof *ib, "cross_length");
    if (st == RC_OK)
        st = rc_calloc((void **)&cnt, n, sizeof *cnt, "cross_length");
    if (st == RC_OK)
        st = rc_calloc((void **)&mx, n, sizeof *mx, "cross_length");
    if (st == RC_OK)
        st = rc_calloc((void **)&mn, n, sizeof *mn, "cross_length");
    if (st == RC_OK) {
        for (int64_t i = 0; i < n; i++) {
            ia[i] = r->cross[i].len_a;
            ib[i] = r->cross[i].len_b;
            cnt[i] = r->cross[i].count;
            mx[i] = r->cross[i].max_abs;
            mn[i] = r->cross[i].mean_abs;
        }
        hid_t g;
        st = group_create(w, o, &g);
        if (st == RC_OK) {
            st = ds_i64_1d(w, g, o, "len_a", n, ia);
            if (st == RC_OK)
                st = ds_i64_1d(w, g, o, "len_b", n, ib);
            if (st == RC_OK)
                st = ds_i64_1d(w, g, o, "count", n, cnt);
            if (st == RC_OK)
                st = ds_f64_1d(w, g, o, "max_abs", n, mx);
            if (st == RC_OK)
                st = ds_f64_1d(w, g, o, "mean_abs", n, mn);
            st = group_close(w, g, o, st);
        }
    }
    free(ia);
    free(ib);
    free(cnt);
    free(mx);
    free(mn);
    return st;
}

/* /growth: var(S) against L and its power-law fit (results.h rc_growth) */
rc_status write_growth(const h5w *w, const rc_results *r)
{
    const char *o = "/growth";
    const rc_growth *gr = &r->growth;
    hid_t g;
    RC_TRY(group_create(w, o, &g));
    rc_status st = attr_str(w, g, o, "fit", "least squares of ln var(S) on ln L over the lengths");
    if (st == RC_OK)
        st = attr_i64(w, g, o, "points", gr->n_points);
    if (st == RC_OK)
        st = attr_f64(w, g, o, "exponent", gr->exponent);
    if (st == RC_OK)
        st = attr_f64(w, g, o, "log_coef", gr->log_coef);
    if (st == RC_OK)
        st = attr_f64(w, g, o, "r2", gr->r2);
    if (st == RC_OK)
        st = attr_str(w, g, o, "looks_like", gr->looks_like);
    if (st == RC_OK)
        st = attr_f64(w, g, o, "cap", gr->cap);
    if (st == RC_OK)
        st = attr_f64(w, g, o, "cap_length", gr->cap_length);
    if (st == RC_OK)
        st = attr_str(w, g, o, "reason", gr->reason);
    int64_t *len = NULL;
    double *var = NULL;
    if (st == RC_OK && (st = rc_calloc((void **)&len, r->n_lens + 1, sizeof *len, "growth")) == RC_OK &&
        (st = rc_calloc((void **)&var, r->n_lens + 1, sizeof *var, "growth")) == RC_OK) {
        for (int i = 0; i < r->n_lens; i++) {
            len[i] = r->lens[i].len;
            var[i] = r->lens[i].st.seq_sum_std * r->lens[i].st.seq_sum_std;
        }
        st = ds_i64_1d(w, g, o, "len", r->n_lens, len);
        if (st == RC_OK)
            st = ds_f64_1d(w, g, o, "seq_log_ratio_sum_var", r->n_lens, var);
    }
    free(len);
    free(var);
    return group_close(w, g, o, st);
}

rc_status write_threeway(const h5w *w, const rc_results *r)
{
    const rc_threeway *t = r->threeway;
    if (!t)
        return RC_OK;
    const char *o = "/threeway";
    hid_t g;
    RC_TRY(group_create(w, o, &g));
    rc_status st = attr_i64(w, g, o, "len", t->len);
    if (st == RC_OK)
        st = attr_str(w, g, o, "ratiocheck", t->ratiocheck);
    if (st == RC_OK)
        st = attr_str(w, g, o, "off", rc_tw_off_names[t->off]);
    if (st == RC_OK)
        st = attr_str(w, g, o, "summary", t->summary);
    if (st == RC_OK && t->ref[0]) { /* each column against the reference */
        st = attr_str(w, g, o, "reference", t->ref);
        if (st == RC_OK)
            st = attr_i64(w, g, o, "reference_count", t->ref_count);
        for (int k = 0; k < RC_TW_COLS && st == RC_OK; k++) {
            char name[96];
            snprintf(name, sizeof name, "%s_ref_mean_abs", rc_threeway_cols[k]);
            st = attr_f64(w, g, o, name, t->ref_mean_abs[k]);
            snprintf(name, sizeof name, "%s_ref_max_abs", rc_threeway_cols[k]);
            if (st == RC_OK)
                st = attr_f64(w, g, o, name, t->ref_max_abs[k]);
        }
    }
    for (int k = 0; k < RC_TW_N && st == RC_OK; k++) {
        const rc_pair_stats *p = &t->pair[k];
        const struct {
            const char *name;
            double v;
        } f[] = {{"mean", p->mean}, {"std", p->std}, {"mean_abs", p->mean_abs}, {"max_abs", p->max_abs},
                 {"k3", p->k3}, {"mult_prob_err", p->mult_prob_err}, {"identical_frac", p->identical_frac}};
        char name[96];
        snprintf(name, sizeof name, "%s_count", rc_threeway_names[k]);
        st = attr_i64(w, g, o, name, p->count);
        for (size_t i = 0; i < sizeof f / sizeof f[0] && st == RC_OK; i++) {
            snprintf(name, sizeof name, "%s_%s", rc_threeway_names[k], f[i].name);
            st = attr_f64(w, g, o, name, f[i].v);
        }
    }
    return group_close(w, g, o, st);
}

rc_status write_verdict(const h5w *w, const rc_results *r)
{
    const char *o = "/verdict";
    const rc_verdict *v = &r->verdict;
    hid_t g;
    RC_TRY(group_create(w, o, &g));
    rc_status st = RC_OK;
    for (int i = 0; i < RC_N_OBJECTIVES && st == RC_OK; i++) {
        char name[64];
        if (v->level[i] == RC_VERDICT_NONE) /* no such line (routing without a MoE layer) */
            continue;
        st = attr_str(w, g, o, rc_objectives[i].name, rc_verdict_name(v->level[i]));
        snprintf(name, sizeof name, "%s_reason", rc_objectives[i].name);
        if (st == RC_OK)
            st = attr_str(w, g, o, name, v->reason[i]);
    }
    if (st == RC_OK)
        st = attr_i64(w, g, o, "len", v->len);
    if (st == RC_OK)
        st = attr_i64(w, g, o, "worst_token_sequence", v->worst_token_seq);
    if (st == RC_OK)
        st = attr_i64(w, g, o, "worst_token_position", v->worst_token_pos);
    if (st == RC_OK)
        st = attr_f64(w, g, o, "worst_token_ratio", v->worst_token_ratio);
    if (st == RC_OK)
        st = attr_i64(w, g, o, "worst_sequence", v->worst_seq);
    if (st == RC_OK)
        st = attr_f64(w, g, o, "worst_sequence_ratio", v->worst_seq_ratio);
    if (st == RC_OK && r->gate_rules[0]) /* the gate (--fail-above, --fail-on) the run was given */
        st = attr_str(w, g, o, "gate", r->gate_fail ? "FAIL" : "PASS");
    if (st == RC_OK && r->gate_rules[0])
        st = attr_str(w, g, o, "gate_rules", r->gate_rules);
    if (st == RC_OK && r->gate_rules[0])
        st = attr_str(w, g, o, "gate_failed", r->gate_failed);
    return group_close(w, g, o, st);
}

/* `ratiocheck sweep`: /sweep (attributes: settings, the best row), one
 * group per setting /sweep/NN: its name, both sides, why it was skipped,
 * whether it equals the base bitwise, the replayed generation log-probs and
 * per length (len_NNNN) the statistics as attributes and the forward
 * log-probs, as the root's groups hold them for the base. */
static rc_status write_sweep(const h5w *w, const rc_results *r)
{
    if (r->n_sweep <= 0)
        return RC_OK;
    const char *o = "/sweep";
    hid_t g;
    RC_TRY(group_create(w, o, &g));
    rc_status st = attr_i64(w, g, o, "settings", r->n_sweep);
    if (st == RC_OK)
        st = attr_i64(w, g, o, "best", r->sweep_best);
    if (st == RC_OK)
        st = attr_str(w, g, o, "best_name", r->sweep_best >= 0 ? r->sweep[r->sweep_best].name : "");
    if (st == RC_OK)
        st = attr_i64(w, g, o, "best_without_invariant", r->sweep_best_other);
    if (st == RC_OK)
        st = attr_str(w, g, o, "best_without_invariant_name",
                      r->sweep_best_other >= 0 ? r->sweep[r->sweep_best_other].name : "");
    st = group_close(w, g, o, st);
    for (int i = 0; i < r->n_sweep && st == RC_OK; i++) {
        const rc_sweep_row *row = &r->sweep[i];
        char so[64];
        snprintf(so, sizeof so, "/sweep/%02d", i);
        hid_t sg;
        RC_TRY(group_create(w, so, &sg));
        st = attr_str(w, sg, so, "name", row->name);
        if (st == RC_OK)
            st = attr_str(w, sg, so, "sampler", row->sampler);
        if (st == RC_OK)
            st = attr_str(w, sg, so, "trainer", row->trainer);
        if (st == RC_OK)
            st = attr_str(w, sg, so, "skipped", row->skipped);
        if (st == RC_OK)
            st = attr_i64(w, sg, so, "noise_floor", row->noise_floor);
        if (st == RC_OK)
            st = attr_i64(w, sg, so, "identical_to_base", row->identical);
        if (st == RC_OK)
            st = attr_i64(w, sg, so, "batch_invariant", row->invariant);
        const rc_results *q = row->res;
        if (st == RC_OK && q)
            st = ds_f32_2d(w, sg, so, "logprob_generation", q->n_seq, q->gen_len, q->logprob_gen);
        st = group_close(w, sg, so, st);
        for (int l = 0; q && l < q->n_lens && st == RC_OK; l++) {
            const rc_len_result *lr = &q->lens[l];
            char lo[96];
            snprintf(lo, sizeof lo, "%s/len_%04lld", so, (long long)lr->len);
            hid_t lg;
            RC_TRY(group_create(w, lo, &lg));
            st = write_len_attrs(w, lg, lo, lr);
            if (st == RC_OK)
                st = ds_f32_2d(w, lg, lo, "logprob_forward", q->n_seq, lr->len, lr->logprob_fwd);
            st = group_close(w, lg, lo, st);
        }
    }
    return st;
}

static rc_status ds_2d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t rows, int64_t cols,
                       bool integer, const void *data)
{
    const double nan_fill = NAN;
    const int64_t none = -1;
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols};
    return integer ? ds_write(w, loc, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 2, dims, data, &none)
                   : ds_write(w, loc, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, dims, data, &nan_fill);
}

/* /trace (ratiocheck trace): the layer x op tables and the first divergence */
static rc_status write_trace(const h5w *w, const rc_results *r)
{
    const rc_trace_out *to = r->trace;
    if (!to)
        return RC_OK;
    const rc_trace_table *tt = to->table;
    const rc_trace_first *f = &tt->first;
    const int64_t NS = tt->n_slots, NO = RC_TOP_COUNT, n = tt->n_seq, cells = NS * NO;
    const char *o = "/trace";
    hid_t g;
    RC_TRY(group_create(w, o, &g));
    rc_status st = attr_str(w, g, o, "sampler", to->sampler);
    if (st == RC_OK) st = attr_str(w, g, o, "trainer", to->trainer);
    if (st == RC_OK) st = attr_i64(w, g, o, "len", to->len);
    if (st == RC_OK) st = attr_i64(w, g, o, "layers", to->n_layers);
    if (st == RC_OK) st = attr_i64(w, g, o, "first_found", f->found);
    if (st == RC_OK) st = attr_i64(w, g, o, "first_layer", f->found ? f->layer : -2);
    if (st == RC_OK) st = attr_str(w, g, o, "first_op", f->found ? rc_trace_op_name(f->op) : "none");
    if (st == RC_OK) st = attr_i64(w, g, o, "first_sequence", f->found ? f->sequence : -1);
    if (st == RC_OK) st = attr_i64(w, g, o, "first_position", f->found ? f->position : -1);
    if (st == RC_OK) st = attr_i64(w, g, o, "first_element", f->found ? f->element : -1);
    if (st == RC_OK) st = attr_f64(w, g, o, "first_sampler", f->found ? (double)f->sampler : NAN);
    if (st == RC_OK) st = attr_f64(w, g, o, "first_trainer", f->found ? (double)f->trainer : NAN);
    if (st == RC_OK) st = attr_f64(w, g, o, "first_ulp", f->found ? f->ulp : NAN);
    if (st == RC_OK) st = attr_i64(w, g, o, "first_sampler_rows", f->found ? f->sampler_rows : -1);
    if (st == RC_OK) st = attr_i64(w, g, o, "first_trainer_rows", f->found ? f->trainer_rows : -1);
    if (st == RC_OK) st = attr_i64(w, g, o, "replay_tokens", to->replay_tokens);
    if (st == RC_OK) st = attr_i64(w, g, o, "replay_equal_gen", to->replay_equal_gen);
    if (st == RC_OK) st = attr_i64(w, g, o, "replay_equal_fwd", to->replay_equal_fwd);
    if (st == RC_OK && to->n_experts > 0) { /* MoE: the first routing flip (-1 / "": none) */
        st = attr_i64(w, g, o, "flip_layer", to->flip.found ? to->flip.layer : -1);
        if (st == RC_OK) st = attr_i64(w, g, o, "flip_sequence", to->flip.found ? to->flip.sequence : -1);
        if (st == RC_OK) st = attr_i64(w, g, o, "flip_position", to->flip.found ? to->flip.position : -1);
        if (st == RC_OK) st = attr_i64(w, g, o, "flip_expert", to->flip.found ? to->flip.expert : -1);
        if (st == RC_OK)
            st = attr_str(w, g, o, "flip_chosen_by",
                          !to->flip.found ? "" : to->flip.by_sampler ? "sampler" : "trainer");
    }
    int64_t *iv = NULL;
    double *dv = NULL;
    char *names[RC_TOP_COUNT];
    for (int i = 0; i < RC_TOP_COUNT; i++)
        names[i] = (char *)rc_trace_op_name((rc_trace_op)i);
    if (st == RC_OK)
        st = rc_calloc((void **)&iv, cells + 4 * n + NS, sizeof *iv, "trace output");
    if (st == RC_OK)
        st = rc_calloc((void **)&dv, cells, sizeof *dv, "trace output");
    if (st == RC_OK)
        st = ds_i64_1d(w, g, o, "sequences", n, tt->seq);
    if (st == RC_OK)
        st = ds_str_1d(w, g, o, "ops", NO, names);
    for (int64_t i = 0; st == RC_OK && i < NS; i++)
        iv[i] = i - 1;
    if (st == RC_OK)
        st = ds_i64_1d(w, g, o, "layer", NS, iv);
    for (int64_t i = 0; st == RC_OK && i < cells; i++)
        iv[i] = tt->cells[i].count;
    if (st == RC_OK)
        st = ds_2d(w, g, o, "count", NS, NO, true, iv);
    for (int k = 0; k < 4 && st == RC_OK; k++) {
        static const char *const dn[4] = {"equal_frac", "max_abs", "rel_l2", "max_ulp"};
        for (int64_t i = 0; i < cells; i++) {
            const rc_trace_cell *c = &tt->cells[i];
            dv[i] = c->count == 0 ? NAN
                    : k == 0      ? (double)c->equal / (double)c->count
                    : k == 1      ? c->max_abs
                    : k == 2      ? c->rel_l2
                                  : c->max_ulp;
        }
        st = ds_2d(w, g, o, dn[k], NS, NO, false, dv);
    }
    for (int64_t k = 0; k < n && st == RC_OK; k++) {
        const rc_trace_first *sf = &tt->seq_first[k];
        iv[k] = sf->found ? sf->layer : -2;
        iv[n + k] = sf->found ? (int64_t)sf->op : -1;
        iv[2 * n + k] = sf->found ? sf->position : -1;
        iv[3 * n + k] = sf->found ? sf->element : -1;
    }
    if (st == RC_OK) st = ds_i64_1d(w, g, o, "seq_first_layer", n, iv);
    if (st == RC_OK) st = ds_i64_1d(w, g, o, "seq_first_op", n, iv + n);
    if (st == RC_OK) st = ds_i64_1d(w, g, o, "seq_first_position", n, iv + 2 * n);
    if (st == RC_OK) st = ds_i64_1d(w, g, o, "seq_first_element", n, iv + 3 * n);
    if (st == RC_OK) st = ds_f32_2d(w, g, o, "logprob_gen", n, to->len, to->logprob_gen);
    if (st == RC_OK) st = ds_f32_2d(w, g, o, "logprob_forward", n, to->len, to->logprob_fwd);
    free(iv);
    free(dv);
    return group_close(w, g, o, st);
}

rc_status write_all(const h5w *w, const rc_results *r)
{
    RC_TRY(write_root_attrs(w, r));
    RC_TRY(write_prompts(w, r));
    RC_TRY(write_rollouts(w, r));
    RC_TRY(write_reference(w, r));
    if (r->n_lens > 0) {
        int64_t max_l = 0;
        for (int i = 0; i < r->n_lens; i++)
            if (r->lens[i].len > max_l)
                max_l = r->lens[i].len;
        float *buf = NULL;
        RC_TRY(rc_calloc((void **)&buf, r->n_seq * max_l, sizeof *buf, "ratio buffer"));
        rc_status st = RC_OK;
        for (int i = 0; i < r->n_lens && st == RC_OK; i++)
            st = write_len(w, r, &r->lens[i], buf);
        free(buf);
        RC_TRY(st);
    }
    RC_TRY(write_cross(w, r));
    RC_TRY(write_growth(w, r));
    RC_TRY(write_verdict(w, r));
    RC_TRY(write_threeway(w, r));
    RC_TRY(write_sweep(w, r));
    RC_TRY(write_routing(w, r));
    return write_trace(w, r);
}
