/* Check suite for the HDF5 results writer (src/results/h5out.c).
 *
 * Every test builds an rc_results by hand (values from simple formulas, with
 * NaN / -1 padding, a NaN in the forward log-probs and distinct statistics),
 * writes it into a fresh temporary folder and reads everything back with the
 * HDF5 C API: types, shapes, chunking, filters, fill values, creation order,
 * and values compared bit for bit. The failure tests check that nothing is
 * left behind: no output and no temporary file.
 *
 * This file holds the fixtures, the checks and the suite; the tests are in
 * test_h5out_write.c, test_h5out_read.c and test_h5out_routing.c (test_h5out.h).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "results.h"
#include "rollout.h"
#include "routing.h"
#include "status.h"

#include "testutil.h"
#include "test_h5out.h"

/* Declared in h5out.c; to move to results.h. */

/* ------------------------------------------------------------------------ */
/* temp folders                                                             */

char g_base[256];
char g_dir[512];

static void setup(void)
{
    rc_test_fresh_dir(g_dir, sizeof g_dir, g_base);
}

static void teardown(void) { rc_test_rm_rf(g_dir); }

const char *tpath(const char *name)
{
    static char bufs[4][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, PATH_MAX, "%s/%s", g_dir, name);
    return b;
}

/* Names in folder `dir`, sorted, joined by ','; "" when empty. */
const char *dir_listing(const char *dir)
{
    static char out[4096];
    char names[64][256];
    int n = 0;
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "opendir %s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 64) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[256];
            memcpy(t, names[j], sizeof t);
            memcpy(names[j], names[j - 1], sizeof t);
            memcpy(names[j - 1], t, sizeof t);
        }
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (i)
            strcat(out, ",");
        strcat(out, names[i]);
    }
    return out;
}

void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    ck_assert_int_eq(fclose(f), 0);
}

void check_text(const char *path, const char *want)
{
    char buf[256] = {0};
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s: %s", path, strerror(errno));
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    ck_assert_str_eq(buf, want);
}

/* ------------------------------------------------------------------------ */
/* building results                                                         */

void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    ck_assert_ptr_nonnull(p);
    return p;
}

char *xstrdup(const char *s)
{
    char *p = strdup(s);
    ck_assert_ptr_nonnull(p);
    return p;
}

static double gen_lp(int64_t s, int64_t t) { return -(0.05 + 0.37 * (double)s + 0.113 * (double)t + 0.001 * (double)(s * t)); }

static void fill_stats(rc_len_stats *st, int i)
{
    double b = 100.0 * (i + 1);
    st->count = 31 + i;
    st->mean = b + 0.5;
    st->std = b + 0.625;
    st->min = b + 0.75;
    st->max = b + 0.875;
    for (int q = 0; q < RC_N_QUANTILES; q++)
        st->quantiles[q] = b + 1.0 + 0.0625 * q;
    for (int k = 0; k < RC_N_THRESHOLDS; k++)
        st->frac_above[k] = b + 2.0 + 0.03125 * k;
    st->k1 = b + 3.1;
    st->k3 = -(b + 3.2);
    st->mult_prob_err = b + 3.3;
    st->identical_frac = b + 3.4;
    st->first_divergent_position = i == 0 ? -1 : 2 + i;
    st->ref_gen_mean_abs = b + 4.1;
    st->ref_gen_max_abs = b + 4.2;
    st->ref_fwd_mean_abs = b + 4.3;
    st->ref_fwd_max_abs = i == 0 ? NAN : b + 4.4;
    st->clipfrac = b + 2.5;
    st->seq_count = 3 + i;
    st->seq_sum_mean = b + 5.1;
    st->seq_sum_std = b + 5.2;
    st->seq_sum_min = -(b + 5.3);
    st->seq_sum_max = b + 5.4;
    st->seq_mean_mean = b + 6.1;
    st->seq_mean_std = b + 6.2;
    st->seq_mean_min = -(b + 6.3);
    st->seq_mean_max = i == 0 ? NAN : b + 6.4;
    st->seq_frac_outside_band = b + 7.1;
    st->seq_frac_above_cap = b + 7.2;
    st->first_count = 5 + i;
    st->first_mean_abs_log_ratio = b + 8.1;
    st->first_max_abs_log_ratio = b + 8.2;
    st->first_k3 = i == 0 ? NAN : b + 8.3;
    st->later_mean_abs_log_ratio = b + 8.4;
    for (size_t k = 0; k < rc_n_corr_stats; k++) /* a distinct value per correction, NaN for one */
        *(double *)(void *)((char *)&st->corr + rc_corr_stats[k].off) =
            (i == 1 && k == 3) ? NAN : b + 8.0 + 0.125 * (double)k;
    for (int k = 0; k < RC_N_STRATA; k++) { /* entropy absent at length 1 (as from an older file) */
        rc_strata *sa = &st->strata[k];
        sa->present = !(k == RC_STRATA_ENTROPY && i == 1);
        sa->count = 40 + i + k;
        for (int e = 0; e < RC_N_DECILES - 1; e++)
            sa->edges[e] = b + 9.0 + 0.25 * e + k;
        for (int d = 0; d < RC_N_DECILES; d++) {
            sa->bin[d].count = d + k;
            for (size_t f = 0; f < rc_n_stratum_fields; f++)
                *(double *)(void *)((char *)&sa->bin[d] + rc_stratum_fields[f].off) =
                    (d == 3 && f == 2) ? NAN : b + 10.0 + d + 0.0625 * (double)f + 0.5 * k;
        }
    }
}

/* n_prompts prompts of up to prompt_max tokens, n_seq sequences of gen_len
 * generated tokens, the given lengths; sequence 2 (when present) stops after
 * 5 tokens; forward log-prob (s=1, t=4) is NaN at every length. */
rc_results *build(int64_t np, int64_t pmax, int64_t ns, int64_t gl, const int64_t *lens,
                         int nlens, bool ref)
{
    rc_results *r = xcalloc(1, sizeof *r);
    snprintf(r->version, sizeof r->version, "0.1.0");
    r->command_line = xstrdup("ratiocheck run --model /m/caf\xc3\xa9 --len 3,7 --note '\xe2\x82\xac'");
    r->model_path = xstrdup("/models/pythia-70m \xc3\xbcn\xc3\xaf");
    snprintf(r->model_type, sizeof r->model_type, "gpt_neox");
    snprintf(r->dtype, sizeof r->dtype, "bf16");
    snprintf(r->kernels, sizeof r->kernels, "invariant");
    snprintf(r->upcast, sizeof r->upcast, "softmax,rope");
    snprintf(r->alibi_bias, sizeof r->alibi_bias, "rowmax");
    snprintf(r->logprob_dtype, sizeof r->logprob_dtype, "fp32");
    snprintf(r->sampler, sizeof r->sampler, "dtype=bf16,kernels=engine,upcast=none,logprob-dtype=fp32,batch=32");
    snprintf(r->trainer, sizeof r->trainer, "dtype=bf16,kernels=engine,upcast=lm_head,logprob-dtype=fp32");
    snprintf(r->reference, sizeof r->reference, ref ? "fp32" : "none");
    snprintf(r->backend, sizeof r->backend, "cpu");
    snprintf(r->device, sizeof r->device, "NVIDIA Test GPU (sm_90, 139 GiB)");
    snprintf(r->created, sizeof r->created, "2024-05-01T12:34:56Z");
    r->threads = 8;
    r->seed = 1234567890123LL;
    r->top_k = 50;
    r->samples = 2;
    r->batch = 4;
    r->forward_batch = 3;
    r->temperature = 0.7;
    r->top_p = 0.95;
    r->stop_at_eos = true;

    r->n_prompts = np;
    r->prompt_max = pmax;
    r->prompt_tokens = xcalloc((size_t)(np * pmax), sizeof(int32_t));
    r->prompt_len = xcalloc((size_t)np, sizeof(int32_t));
    for (int64_t p = 0; p < np; p++) {
        r->prompt_len[p] = (int32_t)(pmax - (p % (pmax > 0 ? pmax : 1)));
        for (int64_t t = 0; t < pmax; t++)
            r->prompt_tokens[p * pmax + t] = t < r->prompt_len[p] ? (int32_t)(1000 + 17 * p + t) : -1;
    }

    r->n_seq = ns;
    r->gen_len = gl;
    r->seq_prompt = xcalloc((size_t)ns, sizeof(int32_t));
    r->seq_sample = xcalloc((size_t)ns, sizeof(int32_t));
    r->gen_valid = xcalloc((size_t)ns, sizeof(int32_t));
    r->gen_tokens = xcalloc((size_t)(ns * gl), sizeof(int32_t));
    r->logprob_gen = xcalloc((size_t)(ns * gl), sizeof(float));
    r->logprob_gen_processed = xcalloc((size_t)(ns * gl), sizeof(float));
    r->entropy_gen = ref ? xcalloc((size_t)(ns * gl) + 1, sizeof(float)) : NULL; /* absent: an older run */
    r->logprob_ref = ref ? xcalloc((size_t)(ns * gl), sizeof(double)) : NULL;
    for (int64_t s = 0; s < ns; s++) {
        r->seq_prompt[s] = (int32_t)(np > 0 ? (s * np) / (ns > 0 ? ns : 1) : 0);
        r->seq_sample[s] = (int32_t)(s % 2);
        r->gen_valid[s] = (int32_t)(s == 2 && gl > 5 ? 5 : gl);
        for (int64_t t = 0; t < gl; t++) {
            int64_t i = s * gl + t;
            bool v = t < r->gen_valid[s];
            r->gen_tokens[i] = v ? (int32_t)(100 + 10 * s + t) : -1;
            r->logprob_gen[i] = v ? (float)gen_lp(s, t) : NAN;
            r->logprob_gen_processed[i] = v ? (float)(0.9 * gen_lp(s, t)) : NAN;
            if (r->entropy_gen)
                r->entropy_gen[i] = v ? (float)(1.0 + 0.01 * (double)(s + t)) : NAN;
            if (ref)
                r->logprob_ref[i] = v ? gen_lp(s, t) + 1e-5 * (double)(s + t) : NAN;
        }
    }

    r->n_lens = nlens;
    r->lens = xcalloc((size_t)nlens, sizeof *r->lens);
    for (int i = 0; i < nlens; i++) {
        rc_len_result *lr = &r->lens[i];
        int64_t L = lens[i];
        lr->len = L;
        lr->logprob_fwd = ns > 0 ? xcalloc((size_t)(ns * L), sizeof(float)) : NULL;
        for (int64_t s = 0; s < ns; s++)
            for (int64_t t = 0; t < L; t++) {
                float g = r->logprob_gen[s * gl + t];
                float f;
                if (isnan(g) || (s == 1 && t == 4))
                    f = NAN;
                else if (s == 0 && t == 0)
                    f = g; /* identical: ratio 1, log ratio 0 */
                else
                    f = (float)((double)g + 0.0007 * (double)(s - t) * (i + 1) + 0.00013);
                lr->logprob_fwd[s * L + t] = f;
            }
        fill_stats(&lr->st, i);
        lr->pos_count = xcalloc((size_t)L, sizeof(int64_t));
        lr->pos_mean_abs_log_ratio = xcalloc((size_t)L, sizeof(double));
        lr->pos_max_abs_log_ratio = xcalloc((size_t)L, sizeof(double));
        lr->pos_ratio_std = xcalloc((size_t)L, sizeof(double));
        for (int64_t t = 0; t < L; t++) {
            lr->pos_count[t] = ns - t % 3 + 1000 * i;
            lr->pos_mean_abs_log_ratio[t] = 1e-4 * (double)(t + 1) + (double)i;
            lr->pos_max_abs_log_ratio[t] = 3e-4 * (double)(t + 1) + (double)i;
            lr->pos_ratio_std[t] = t == 1 ? NAN : 2e-4 * (double)(t + 1) + (double)i;
        }
        lr->seq_log_ratio_sum = xcalloc((size_t)ns + 1, sizeof(double));
        lr->seq_log_ratio_mean = xcalloc((size_t)ns + 1, sizeof(double));
        for (int64_t s = 0; s < ns; s++) {
            lr->seq_log_ratio_sum[s] = s == 1 ? NAN : 1e-3 * (double)(s + 1) - (double)i;
            lr->seq_log_ratio_mean[s] = s == 1 ? NAN : -2e-5 * (double)(s + 1) + (double)i;
        }
    }
    r->n_cross = nlens > 1 ? nlens - 1 : 0;
    r->cross = xcalloc((size_t)r->n_cross, sizeof *r->cross);
    for (int i = 1; i < nlens; i++) {
        r->cross[i - 1].len_a = lens[i - 1];
        r->cross[i - 1].len_b = lens[i];
        r->cross[i - 1].count = 15 + i;
        r->cross[i - 1].max_abs = 0.25 + i;
        r->cross[i - 1].mean_abs = 0.125 + i;
    }
    r->growth.n_points = nlens;
    r->growth.exponent = 1.25;
    r->growth.log_coef = -7.5;
    r->growth.r2 = nlens > 2 ? 0.875 : NAN;
    r->growth.cap = 3.0;
    r->growth.cap_length = 1234.5;
    snprintf(r->growth.looks_like, sizeof r->growth.looks_like, "sqrt(L)");
    snprintf(r->growth.reason, sizeof r->growth.reason, "r\xc3\xa9" "ason");
    r->verdict.level[RC_OBJ_TOKEN_PPO] = RC_VERDICT_WARN;
    r->verdict.level[RC_OBJ_SEQUENCE_IS] = RC_VERDICT_OK;
    r->verdict.level[RC_OBJ_GSPO] = RC_VERDICT_FAIL;
    r->verdict.level[RC_OBJ_ROUTING] = RC_VERDICT_NONE; /* no routing record: no line */
    snprintf(r->verdict.reason[RC_OBJ_TOKEN_PPO], sizeof r->verdict.reason[0], "1.5%% of tokens clipped");
    snprintf(r->verdict.reason[RC_OBJ_GSPO], sizeof r->verdict.reason[0], "r\xc3\xa9" "ason \xe2\x86\x92" " 50%%");
    r->verdict.len = nlens > 0 ? lens[nlens - 1] : -1;
    r->verdict.worst_token_seq = ns > 1 ? 1 : -1;
    r->verdict.worst_token_pos = 2;
    r->verdict.worst_token_ratio = 0.515625;
    r->verdict.worst_seq = 0;
    r->verdict.worst_seq_ratio = NAN;
    r->seconds_generate = 1.25;
    r->seconds_forward = 2.5;
    r->seconds_total = 4.0625;
    return r;
}

rc_results *build_default(bool ref)
{
    static const int64_t lens[2] = {3, 7};
    return build(3, 4, 5, 7, lens, 2, ref);
}

void destroy(rc_results *r)
{
    if (!r)
        return;
    free(r->command_line);
    free(r->model_path);
    free(r->prompt_tokens);
    free(r->prompt_len);
    free(r->seq_prompt);
    free(r->seq_sample);
    free(r->gen_valid);
    free(r->gen_tokens);
    free(r->logprob_gen);
    free(r->logprob_gen_processed);
    free(r->entropy_gen);
    free(r->logprob_ref);
    for (int i = 0; i < r->n_lens; i++) {
        free(r->lens[i].logprob_fwd);
        free(r->lens[i].pos_count);
        free(r->lens[i].pos_mean_abs_log_ratio);
        free(r->lens[i].pos_max_abs_log_ratio);
        free(r->lens[i].pos_ratio_std);
        free(r->lens[i].seq_log_ratio_sum);
        free(r->lens[i].seq_log_ratio_mean);
        free(r->lens[i].dist_kl);
        free(r->lens[i].dist_tv);
        free(r->lens[i].dist_top1);
        free(r->lens[i].pos_kl_mean);
        free(r->lens[i].pos_tv_mean);
        free(r->lens[i].pos_top1_agree);
    }
    free(r->lens);
    free(r->cross);
    free(r->logprob_trainer);
    free(r->logprob_ratiocheck);
    free(r->threeway);
    rc_routing_free(r->routing);
    free(r);
}

/* ------------------------------------------------------------------------ */
/* reading back                                                             */

typedef struct {
    char names[64][64];
    int n;
} name_list;

static herr_t link_cb(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
    (void)g;
    (void)info;
    name_list *l = data;
    if (l->n < 64)
        snprintf(l->names[l->n++], sizeof l->names[0], "%s", name);
    return 0;
}

static herr_t attr_cb(hid_t loc, const char *name, const H5A_info_t *info, void *data)
{
    (void)loc;
    (void)info;
    name_list *l = data;
    if (l->n < 64)
        snprintf(l->names[l->n++], sizeof l->names[0], "%s", name);
    return 0;
}

/* The members of group loc, in creation order, are exactly want[0..n). */
static void check_links(hid_t loc, const char *const *want, int n)
{
    name_list l = {.n = 0};
    ck_assert_int_ge(H5Literate(loc, H5_INDEX_CRT_ORDER, H5_ITER_INC, NULL, link_cb, &l), 0);
    ck_assert_int_eq(l.n, n);
    for (int i = 0; i < n; i++)
        ck_assert_str_eq(l.names[i], want[i]);
}

/* The attributes of loc, in creation order, are exactly want[0..n). */
static void check_attr_names(hid_t loc, const char *const *want, int n)
{
    name_list l = {.n = 0};
    ck_assert_int_ge(H5Aiterate2(loc, H5_INDEX_CRT_ORDER, H5_ITER_INC, NULL, attr_cb, &l), 0);
    ck_assert_int_eq(l.n, n);
    for (int i = 0; i < n; i++)
        ck_assert_str_eq(l.names[i], want[i]);
}

static void check_attr_str(hid_t loc, const char *name, const char *want)
{
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "attribute %s missing", name);
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    ck_assert_int_eq(H5Tget_class(t), H5T_STRING);
    ck_assert_int_gt(H5Tis_variable_str(t), 0);
    ck_assert_int_eq(H5Tget_cset(t), H5T_CSET_UTF8);
    ck_assert_int_eq(H5Sget_simple_extent_type(sp), H5S_SCALAR);
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5T_CSET_UTF8);
    char *s = NULL;
    ck_assert_int_ge(H5Aread(a, mt, &s), 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(strcmp(s, want) == 0, "attribute %s: got '%s', want '%s'", name, s, want);
    H5free_memory(s);
    H5Tclose(mt);
    H5Tclose(t);
    H5Sclose(sp);
    H5Aclose(a);
}

static void check_attr_i64(hid_t loc, const char *name, int64_t want)
{
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "attribute %s missing", name);
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    ck_assert_msg(H5Tequal(t, H5T_STD_I64LE) > 0, "attribute %s is not int64", name);
    ck_assert_int_eq(H5Sget_simple_extent_type(sp), H5S_SCALAR);
    int64_t v = 0;
    ck_assert_int_ge(H5Aread(a, H5T_NATIVE_INT64, &v), 0);
    ck_assert_msg(v == want, "attribute %s: got %lld, want %lld", name, (long long)v,
                  (long long)want);
    H5Tclose(t);
    H5Sclose(sp);
    H5Aclose(a);
}

static bool same_f64(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

static bool same_f32(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

static void check_attr_f64(hid_t loc, const char *name, double want)
{
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "attribute %s missing", name);
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    ck_assert_msg(H5Tequal(t, H5T_IEEE_F64LE) > 0, "attribute %s is not float64", name);
    ck_assert_int_eq(H5Sget_simple_extent_type(sp), H5S_SCALAR);
    double v = 0;
    ck_assert_int_ge(H5Aread(a, H5T_NATIVE_DOUBLE, &v), 0);
    ck_assert_msg(same_f64(v, want), "attribute %s: got %.17g, want %.17g", name, v, want);
    H5Tclose(t);
    H5Sclose(sp);
    H5Aclose(a);
}

static void check_attr_i64_array(hid_t loc, const char *name, const int64_t *want, int64_t n)
{
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "attribute %s missing", name);
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    ck_assert(H5Tequal(t, H5T_STD_I64LE) > 0);
    ck_assert_int_eq(H5Sget_simple_extent_type(sp), H5S_SIMPLE);
    ck_assert_int_eq(H5Sget_simple_extent_ndims(sp), 1);
    hsize_t dim = 99;
    H5Sget_simple_extent_dims(sp, &dim, NULL);
    ck_assert_uint_eq(dim, (hsize_t)n);
    if (n > 0) {
        int64_t *v = xcalloc((size_t)n, sizeof *v);
        ck_assert_int_ge(H5Aread(a, H5T_NATIVE_INT64, v), 0);
        for (int64_t i = 0; i < n; i++)
            ck_assert_int_eq(v[i], want[i]);
        free(v);
    }
    H5Tclose(t);
    H5Sclose(sp);
    H5Aclose(a);
}

/* Open dataset name in loc and check its type, shape, layout, filters and
 * fill value; read it whole (in mtype) into a new buffer. */
void *read_ds(hid_t loc, const char *name, hid_t ftype, hid_t mtype, size_t esz, int rank,
                     hsize_t d0, hsize_t d1)
{
    hid_t ds = H5Dopen2(loc, name, H5P_DEFAULT);
    ck_assert_msg(ds >= 0, "dataset %s missing", name);
    hid_t t = H5Dget_type(ds);
    ck_assert_msg(H5Tequal(t, ftype) > 0, "dataset %s has the wrong type", name);
    H5Tclose(t);
    hid_t sp = H5Dget_space(ds);
    ck_assert_int_eq(H5Sget_simple_extent_ndims(sp), rank);
    hsize_t dims[2] = {0, 0};
    H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    ck_assert_msg(dims[0] == d0 && (rank == 1 || dims[1] == d1), "dataset %s: shape %llu x %llu",
                  name, (unsigned long long)dims[0], (unsigned long long)dims[1]);
    hsize_t n = rank == 1 ? d0 : d0 * d1;

    hid_t dcpl = H5Dget_create_plist(ds);
    ck_assert_int_ge(dcpl, 0);
    if (rank == 2 && n > 0) {
        ck_assert_int_eq(H5Pget_layout(dcpl), H5D_CHUNKED);
        hsize_t chunk[2] = {0, 0};
        ck_assert_int_eq(H5Pget_chunk(dcpl, 2, chunk), 2);
        hsize_t cc = d1 < 262144 ? d1 : 262144;
        hsize_t cr = 65536 / cc;
        if (cr < 1)
            cr = 1;
        if (cr > d0)
            cr = d0;
        ck_assert_uint_eq(chunk[0], cr);
        ck_assert_uint_eq(chunk[1], cc);
        if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
            ck_assert_int_eq(H5Pget_nfilters(dcpl), 2);
            unsigned flags, cd[4];
            size_t ncd = 4;
            ck_assert_int_eq(H5Pget_filter2(dcpl, 0, &flags, &ncd, cd, 0, NULL, NULL),
                             H5Z_FILTER_SHUFFLE);
            ncd = 4;
            ck_assert_int_eq(H5Pget_filter2(dcpl, 1, &flags, &ncd, cd, 0, NULL, NULL),
                             H5Z_FILTER_DEFLATE);
            ck_assert_uint_ge(ncd, 1);
            ck_assert_uint_eq(cd[0], 4);
        }
    } else {
        ck_assert_int_eq(H5Pget_nfilters(dcpl), 0);
    }
    if (rank == 2) {
        H5D_fill_value_t fv;
        ck_assert_int_ge(H5Pfill_value_defined(dcpl, &fv), 0);
        ck_assert_int_eq(fv, H5D_FILL_VALUE_USER_DEFINED);
        if (H5Tget_class(ftype) == H5T_FLOAT) {
            float f = 0;
            ck_assert_int_ge(H5Pget_fill_value(dcpl, H5T_NATIVE_FLOAT, &f), 0);
            ck_assert(isnan(f));
        } else {
            int32_t i = 0;
            ck_assert_int_ge(H5Pget_fill_value(dcpl, H5T_NATIVE_INT32, &i), 0);
            ck_assert_int_eq(i, -1);
        }
    }
    H5Pclose(dcpl);

    void *buf = xcalloc((size_t)n, esz);
    if (n > 0)
        ck_assert_int_ge(H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), 0);
    H5Dclose(ds);
    return buf;
}

static void check_i32(hid_t loc, const char *name, const int32_t *want, int rank, int64_t d0,
                      int64_t d1)
{
    int32_t *v = read_ds(loc, name, H5T_STD_I32LE, H5T_NATIVE_INT32, sizeof *v, rank,
                         (hsize_t)d0, (hsize_t)d1);
    int64_t n = rank == 1 ? d0 : d0 * d1;
    int64_t i = 0; /* find the first mismatch (one assertion per call: Check's are slow) */
    while (i < n && v[i] == want[i])
        i++;
    ck_assert_msg(i == n, "%s[%lld]: got %d, want %d", name, (long long)i, v[i], want[i]);
    free(v);
}

static void check_i64_1d(hid_t loc, const char *name, const int64_t *want, int64_t n)
{
    int64_t *v = read_ds(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, sizeof *v, 1, (hsize_t)n, 0);
    int64_t i = 0;
    while (i < n && v[i] == want[i])
        i++;
    ck_assert_msg(i == n, "%s[%lld]: got %lld, want %lld", name, (long long)i, (long long)v[i],
                  (long long)want[i]);
    free(v);
}

static void check_f64_1d(hid_t loc, const char *name, const double *want, int64_t n)
{
    double *v = read_ds(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, sizeof *v, 1, (hsize_t)n, 0);
    int64_t i = 0;
    while (i < n && same_f64(v[i], want[i]))
        i++;
    ck_assert_msg(i == n, "%s[%lld]: got %.17g, want %.17g", name, (long long)i, v[i], want[i]);
    free(v);
}

static void check_f32_2d(hid_t loc, const char *name, const float *want, int64_t d0, int64_t d1)
{
    float *v = read_ds(loc, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, sizeof *v, 2, (hsize_t)d0,
                       (hsize_t)d1);
    int64_t i = 0;
    while (i < d0 * d1 && same_f32(v[i], want[i]))
        i++;
    ck_assert_msg(i == d0 * d1, "%s[%lld]: got %.9g, want %.9g", name, (long long)i,
                  (double)v[i], (double)want[i]);
    free(v);
}

static void check_f64_2d(hid_t loc, const char *name, const double *want, int64_t d0, int64_t d1)
{
    double *v = read_ds(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, sizeof *v, 2, (hsize_t)d0, (hsize_t)d1);
    int64_t i = 0;
    while (i < d0 * d1 && (memcmp(&v[i], &want[i], sizeof *v) == 0 || (isnan(v[i]) && isnan(want[i]))))
        i++;
    ck_assert_msg(i == d0 * d1, "%s[%lld]: got %.17g, want %.17g", name, (long long)i, v[i], want[i]);
    free(v);
}

static hid_t open_group(hid_t f, const char *name)
{
    hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(g >= 0, "group %s missing", name);
    return g;
}

static const char *const k_root_attrs[] = {
    "format",        "format_version", "version",      "command_line",  "model_path",
    "model_type",    "layers",         "dtype",          "kernels",      "upcast",        "alibi_bias",    "logprob_dtype", "sampler", "trainer",
    "reference",     "backend",        "device",        "gpu_split",    "created",      "threads",       "seed",
    "top_k",         "samples",        "batch",        "forward_batch", "num_prompts",
    "num_sequences", "gen_len",        "temperature",  "top_p",         "stop_at_eos",
    "clip_eps_low",  "clip_eps_high",  "seq_eps",      "seq_cap",
    "lengths",       "seconds_generate", "seconds_forward", "seconds_total", "seconds_reference",
};

static const char *const k_len_attrs[] = {
    "len", "count", "mean", "std", "min", "max",
    "quantile_0.1pct", "quantile_1pct", "quantile_50pct", "quantile_99pct", "quantile_99.9pct",
    "frac_abs_ratio_minus_1_gt_0.001", "frac_abs_ratio_minus_1_gt_0.01",
    "frac_abs_ratio_minus_1_gt_0.1", "frac_abs_ratio_minus_1_gt_0.2", "clipfrac",
    "k1", "k3", "mult_prob_err", "identical_frac", "first_divergent_position",
    "ref_gen_mean_abs", "ref_gen_max_abs", "ref_fwd_mean_abs", "ref_fwd_max_abs",
    "seq_count", "seq_log_ratio_sum_mean", "seq_log_ratio_sum_std", "seq_log_ratio_sum_min",
    "seq_log_ratio_sum_max", "seq_log_ratio_mean_mean", "seq_log_ratio_mean_std", "seq_log_ratio_mean_min",
    "seq_log_ratio_mean_max", "seq_frac_outside_band", "seq_frac_above_cap",
    /* the corrections (README "Corrections"), in rc_corr_stats' order */
    "token_tis_clipfrac", "token_mis_maskfrac", "icepop_maskfrac", "token_cap3_frac",
    "dppo_maskfrac_high", "dppo_maskfrac_low", "prime_legacy_maskfrac", "seq_tis_clipfrac",
    "seq_mis_maskfrac", "seq_geo_rs_maskfrac", "seq_cap3_frac", "chi2_token", "chi2_seq",
    "ppl_trainer", "ppl_sampler", "log_ppl_diff", "log_ppl_abs_diff", "ppl_ratio",
    "mean_abs_log_ratio", "max_abs_log_ratio",
    /* the first generated token on its own */
    "first_token_count", "first_token_mean_abs_log_ratio", "first_token_max_abs_log_ratio", "first_token_k3",
    "later_tokens_mean_abs_log_ratio",
};

/* /len_NNNN/strata/{prob,entropy} agree with st (a kind not present: absent) */
static void check_strata(hid_t lg, const rc_len_stats *st)
{
    hid_t sg = open_group(lg, "strata");
    const char *kinds[RC_N_STRATA];
    int nk = 0;
    for (int k = 0; k < RC_N_STRATA; k++)
        if (st->strata[k].present)
            kinds[nk++] = rc_strata_names[k];
    check_links(sg, kinds, nk);
    for (int k = 0; k < RC_N_STRATA; k++) {
        const rc_strata *sa = &st->strata[k];
        if (!sa->present)
            continue;
        hid_t g = open_group(sg, rc_strata_names[k]);
        static const char *const attrs[] = {"count", "edges"};
        check_attr_names(g, attrs, NELEM(attrs));
        check_attr_i64(g, "count", sa->count);
        hid_t a = H5Aopen(g, "edges", H5P_DEFAULT);
        double e[RC_N_DECILES - 1];
        ck_assert_int_ge(a, 0);
        ck_assert_int_ge(H5Aread(a, H5T_NATIVE_DOUBLE, e), 0);
        H5Aclose(a);
        ck_assert_mem_eq(e, sa->edges, sizeof e);
        const char *links[16] = {"count"};
        for (size_t f = 0; f < rc_n_stratum_fields; f++)
            links[1 + f] = rc_stratum_fields[f].name;
        check_links(g, links, 1 + (int)rc_n_stratum_fields);
        int64_t c[RC_N_DECILES];
        double v[RC_N_DECILES];
        for (int d = 0; d < RC_N_DECILES; d++)
            c[d] = sa->bin[d].count;
        check_i64_1d(g, "count", c, RC_N_DECILES);
        for (size_t f = 0; f < rc_n_stratum_fields; f++) {
            for (int d = 0; d < RC_N_DECILES; d++)
                v[d] = rc_stratum_value(&sa->bin[d], &rc_stratum_fields[f]);
            check_f64_1d(g, rc_stratum_fields[f].name, v, RC_N_DECILES);
        }
        H5Gclose(g);
    }
    H5Gclose(sg);
}

/* Everything in the file at path agrees with r. `cmd` / `model` override the
 * expected command_line / model_path (for the UTF-8 test), NULL = r's. */
void check_file_ex(const char *path, const rc_results *r, const char *cmd, const char *model)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    ck_assert_int_gt(H5Fis_hdf5(path), 0);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_int_ge(f, 0);

    /* root members in creation order */
    const char *links[64];
    char lnames[64][32];
    int nl = 0;
    links[nl++] = "prompts";
    links[nl++] = "rollouts";
    if (r->logprob_ref)
        links[nl++] = "reference";
    for (int i = 0; i < r->n_lens; i++) {
        snprintf(lnames[i], sizeof lnames[i], "len_%04lld", (long long)r->lens[i].len);
        links[nl++] = lnames[i];
    }
    links[nl++] = "cross_length";
    links[nl++] = "growth";
    links[nl++] = "verdict";
    check_links(f, links, nl);

    /* root attributes */
    check_attr_names(f, k_root_attrs, NELEM(k_root_attrs));
    check_attr_str(f, "format", "ratiocheck-results");
    check_attr_i64(f, "format_version", 1);
    check_attr_str(f, "version", r->version);
    check_attr_str(f, "command_line", cmd ? cmd : r->command_line);
    check_attr_str(f, "model_path", model ? model : r->model_path);
    check_attr_str(f, "model_type", r->model_type);
    check_attr_str(f, "dtype", r->dtype);
    check_attr_str(f, "kernels", r->kernels);
    check_attr_str(f, "upcast", r->upcast);
    check_attr_str(f, "alibi_bias", r->alibi_bias);
    check_attr_str(f, "logprob_dtype", r->logprob_dtype);
    check_attr_str(f, "sampler", r->sampler);
    check_attr_str(f, "trainer", r->trainer);
    check_attr_str(f, "reference", r->reference);
    check_attr_str(f, "backend", r->backend);
    check_attr_str(f, "device", r->device);
    check_attr_str(f, "created", r->created);
    check_attr_i64(f, "threads", r->threads);
    check_attr_i64(f, "seed", r->seed);
    check_attr_i64(f, "top_k", r->top_k);
    check_attr_i64(f, "samples", r->samples);
    check_attr_i64(f, "batch", r->batch);
    check_attr_i64(f, "forward_batch", r->forward_batch);
    check_attr_i64(f, "num_prompts", r->n_prompts);
    check_attr_i64(f, "num_sequences", r->n_seq);
    check_attr_i64(f, "gen_len", r->gen_len);
    check_attr_f64(f, "temperature", r->temperature);
    check_attr_f64(f, "top_p", r->top_p);
    check_attr_i64(f, "stop_at_eos", r->stop_at_eos ? 1 : 0);
    int64_t lens[64];
    for (int i = 0; i < r->n_lens; i++)
        lens[i] = r->lens[i].len;
    check_attr_i64_array(f, "lengths", lens, r->n_lens);
    check_attr_f64(f, "seconds_generate", r->seconds_generate);
    check_attr_f64(f, "seconds_forward", r->seconds_forward);
    check_attr_f64(f, "seconds_total", r->seconds_total);
    check_attr_f64(f, "seconds_reference", r->seconds_reference);

    const int64_t S = r->n_seq, T = r->gen_len;
    /* /prompts */
    hid_t g = open_group(f, "prompts");
    static const char *const prompt_links[] = {"tokens", "lengths"};
    check_links(g, prompt_links, 2);
    check_i32(g, "tokens", r->prompt_tokens, 2, r->n_prompts, r->prompt_max);
    check_i32(g, "lengths", r->prompt_len, 1, r->n_prompts, 0);
    H5Gclose(g);

    /* /rollouts */
    g = open_group(f, "rollouts");
    static const char *const roll_links[] = {"prompt_index", "sample_index", "tokens",
                                             "lengths", "logprob_gen", "logprob_gen_processed", "entropy"};
    check_links(g, roll_links, NELEM(roll_links) - (r->entropy_gen ? 0 : 1));
    if (r->entropy_gen)
        check_f32_2d(g, "entropy", r->entropy_gen, S, T);
    check_i32(g, "prompt_index", r->seq_prompt, 1, S, 0);
    check_i32(g, "sample_index", r->seq_sample, 1, S, 0);
    check_i32(g, "tokens", r->gen_tokens, 2, S, T);
    check_i32(g, "lengths", r->gen_valid, 1, S, 0);
    check_f32_2d(g, "logprob_gen", r->logprob_gen, S, T);
    check_f32_2d(g, "logprob_gen_processed", r->logprob_gen_processed, S, T);
    H5Gclose(g);

    /* /reference */
    ck_assert_int_eq(H5Lexists(f, "reference", H5P_DEFAULT), r->logprob_ref ? 1 : 0);
    if (r->logprob_ref) {
        g = open_group(f, "reference");
        static const char *const ref_links[] = {"logprob"};
        check_links(g, ref_links, 1);
        check_f64_2d(g, "logprob", r->logprob_ref, S, T);
        H5Gclose(g);
    }

    /* /len_NNNN */
    for (int i = 0; i < r->n_lens; i++) {
        const rc_len_result *lr = &r->lens[i];
        const rc_len_stats *st = &lr->st;
        const int64_t L = lr->len;
        g = open_group(f, lnames[i]);
        check_attr_names(g, k_len_attrs, NELEM(k_len_attrs));
        check_attr_i64(g, "len", L);
        check_attr_i64(g, "count", st->count);
        check_attr_f64(g, "mean", st->mean);
        check_attr_f64(g, "std", st->std);
        check_attr_f64(g, "min", st->min);
        check_attr_f64(g, "max", st->max);
        check_attr_f64(g, "quantile_0.1pct", st->quantiles[0]);
        check_attr_f64(g, "quantile_1pct", st->quantiles[1]);
        check_attr_f64(g, "quantile_50pct", st->quantiles[2]);
        check_attr_f64(g, "quantile_99pct", st->quantiles[3]);
        check_attr_f64(g, "quantile_99.9pct", st->quantiles[4]);
        check_attr_f64(g, "frac_abs_ratio_minus_1_gt_0.001", st->frac_above[0]);
        check_attr_f64(g, "frac_abs_ratio_minus_1_gt_0.01", st->frac_above[1]);
        check_attr_f64(g, "frac_abs_ratio_minus_1_gt_0.1", st->frac_above[2]);
        check_attr_f64(g, "frac_abs_ratio_minus_1_gt_0.2", st->frac_above[3]);
        check_attr_f64(g, "clipfrac", st->clipfrac);
        check_attr_f64(g, "k1", st->k1);
        check_attr_f64(g, "k3", st->k3);
        check_attr_f64(g, "mult_prob_err", st->mult_prob_err);
        check_attr_f64(g, "identical_frac", st->identical_frac);
        check_attr_i64(g, "first_divergent_position", st->first_divergent_position);
        check_attr_f64(g, "ref_gen_mean_abs", st->ref_gen_mean_abs);
        check_attr_f64(g, "ref_gen_max_abs", st->ref_gen_max_abs);
        check_attr_f64(g, "ref_fwd_mean_abs", st->ref_fwd_mean_abs);
        check_attr_f64(g, "ref_fwd_max_abs", st->ref_fwd_max_abs);
        check_attr_i64(g, "seq_count", st->seq_count);
        check_attr_f64(g, "seq_log_ratio_sum_mean", st->seq_sum_mean);
        check_attr_f64(g, "seq_log_ratio_sum_std", st->seq_sum_std);
        check_attr_f64(g, "seq_log_ratio_sum_min", st->seq_sum_min);
        check_attr_f64(g, "seq_log_ratio_sum_max", st->seq_sum_max);
        check_attr_f64(g, "seq_log_ratio_mean_mean", st->seq_mean_mean);
        check_attr_f64(g, "seq_log_ratio_mean_std", st->seq_mean_std);
        check_attr_f64(g, "seq_log_ratio_mean_min", st->seq_mean_min);
        check_attr_f64(g, "seq_log_ratio_mean_max", st->seq_mean_max);
        check_attr_f64(g, "seq_frac_outside_band", st->seq_frac_outside_band);
        check_attr_i64(g, "first_token_count", st->first_count);
        check_attr_f64(g, "first_token_mean_abs_log_ratio", st->first_mean_abs_log_ratio);
        check_attr_f64(g, "first_token_max_abs_log_ratio", st->first_max_abs_log_ratio);
        check_attr_f64(g, "first_token_k3", st->first_k3);
        check_attr_f64(g, "later_tokens_mean_abs_log_ratio", st->later_mean_abs_log_ratio);
        check_attr_f64(g, "seq_frac_above_cap", st->seq_frac_above_cap);
        for (size_t k = 0; k < rc_n_corr_stats; k++)
            check_attr_f64(g, rc_corr_stats[k].name, rc_corr_value(&st->corr, &rc_corr_stats[k]));

        static const char *const len_links[] = {
            "logprob_forward", "ratio", "log_ratio", "pos_count",
            "pos_mean_abs_log_ratio", "pos_max_abs_log_ratio", "pos_ratio_std", "seq_log_ratio_sum",
            "seq_log_ratio_mean", "strata"};
        check_links(g, len_links, NELEM(len_links));
        check_strata(g, st);
        float *ratio = xcalloc((size_t)(S * L), sizeof(float));
        float *lratio = xcalloc((size_t)(S * L), sizeof(float));
        for (int64_t s = 0; s < S; s++)
            for (int64_t t = 0; t < L; t++) {
                float fw = lr->logprob_fwd[s * L + t], gn = r->logprob_gen[s * T + t];
                ratio[s * L + t] = (float)exp((double)fw - (double)gn);
                lratio[s * L + t] = fw - gn;
            }
        check_f32_2d(g, "logprob_forward", lr->logprob_fwd, S, L);
        check_f32_2d(g, "ratio", ratio, S, L);
        check_f32_2d(g, "log_ratio", lratio, S, L);
        check_i64_1d(g, "pos_count", lr->pos_count, L);
        check_f64_1d(g, "pos_mean_abs_log_ratio", lr->pos_mean_abs_log_ratio, L);
        check_f64_1d(g, "pos_max_abs_log_ratio", lr->pos_max_abs_log_ratio, L);
        check_f64_1d(g, "pos_ratio_std", lr->pos_ratio_std, L);
        check_f64_1d(g, "seq_log_ratio_sum", lr->seq_log_ratio_sum, S);
        check_f64_1d(g, "seq_log_ratio_mean", lr->seq_log_ratio_mean, S);
        free(ratio);
        free(lratio);
        H5Gclose(g);
    }

    /* /cross_length */
    g = open_group(f, "cross_length");
    static const char *const cross_links[] = {"len_a", "len_b", "count", "max_abs", "mean_abs"};
    check_links(g, cross_links, NELEM(cross_links));
    {
        const int64_t n = r->n_cross;
        int64_t *a = xcalloc((size_t)n, 8), *b = xcalloc((size_t)n, 8), *c = xcalloc((size_t)n, 8);
        double *mx = xcalloc((size_t)n, 8), *mn = xcalloc((size_t)n, 8);
        for (int64_t i = 0; i < n; i++) {
            a[i] = r->cross[i].len_a;
            b[i] = r->cross[i].len_b;
            c[i] = r->cross[i].count;
            mx[i] = r->cross[i].max_abs;
            mn[i] = r->cross[i].mean_abs;
        }
        check_i64_1d(g, "len_a", a, n);
        check_i64_1d(g, "len_b", b, n);
        check_i64_1d(g, "count", c, n);
        check_f64_1d(g, "max_abs", mx, n);
        check_f64_1d(g, "mean_abs", mn, n);
        free(a);
        free(b);
        free(c);
        free(mx);
        free(mn);
    }
    H5Gclose(g);

    /* /growth */
    g = open_group(f, "growth");
    static const char *const growth_attrs[] = {"fit", "points", "exponent", "log_coef", "r2", "looks_like",
                                               "cap", "cap_length", "reason"};
    check_attr_names(g, growth_attrs, NELEM(growth_attrs));
    static const char *const growth_links[] = {"len", "seq_log_ratio_sum_var"};
    check_links(g, growth_links, NELEM(growth_links));
    check_attr_i64(g, "points", r->growth.n_points);
    check_attr_f64(g, "exponent", r->growth.exponent);
    check_attr_f64(g, "log_coef", r->growth.log_coef);
    check_attr_f64(g, "r2", r->growth.r2);
    check_attr_str(g, "looks_like", r->growth.looks_like);
    check_attr_f64(g, "cap", r->growth.cap);
    check_attr_f64(g, "cap_length", r->growth.cap_length);
    check_attr_str(g, "reason", r->growth.reason);
    {
        int64_t gl[64];
        double gv[64];
        for (int i = 0; i < r->n_lens; i++) {
            gl[i] = r->lens[i].len;
            gv[i] = r->lens[i].st.seq_sum_std * r->lens[i].st.seq_sum_std;
        }
        check_i64_1d(g, "len", gl, r->n_lens);
        check_f64_1d(g, "seq_log_ratio_sum_var", gv, r->n_lens);
    }
    H5Gclose(g);

    /* /verdict: attributes only, in this order */
    g = open_group(f, "verdict");
    static const char *const verdict_attrs[] = {
        "token_ppo", "token_ppo_reason", "sequence_is", "sequence_is_reason", "gspo", "gspo_reason", "len",
        "worst_token_sequence", "worst_token_position", "worst_token_ratio", "worst_sequence",
        "worst_sequence_ratio"};
    check_attr_names(g, verdict_attrs, NELEM(verdict_attrs));
    {
        const rc_verdict *v = &r->verdict;
        check_attr_str(g, "token_ppo", rc_verdict_name(v->level[RC_OBJ_TOKEN_PPO]));
        check_attr_str(g, "token_ppo_reason", v->reason[RC_OBJ_TOKEN_PPO]);
        check_attr_str(g, "sequence_is", rc_verdict_name(v->level[RC_OBJ_SEQUENCE_IS]));
        check_attr_str(g, "gspo", rc_verdict_name(v->level[RC_OBJ_GSPO]));
        check_attr_str(g, "gspo_reason", v->reason[RC_OBJ_GSPO]);
        check_attr_i64(g, "len", v->len);
        check_attr_i64(g, "worst_token_sequence", v->worst_token_seq);
        check_attr_i64(g, "worst_token_position", v->worst_token_pos);
        check_attr_f64(g, "worst_token_ratio", v->worst_token_ratio);
        check_attr_i64(g, "worst_sequence", v->worst_seq);
        check_attr_f64(g, "worst_sequence_ratio", v->worst_seq_ratio);
    }
    H5Gclose(g);

    ck_assert_int_eq(H5Fget_obj_count(f, H5F_OBJ_ALL), 1); /* only the file itself is open */
    ck_assert_int_ge(H5Fclose(f), 0);
}

void check_file(const char *path, const rc_results *r) { check_file_ex(path, r, NULL, NULL); }

/* ------------------------------------------------------------------------ */

static Suite *h5out_suite(void)
{
    Suite *s = suite_create("h5out");

    TCase *w = tcase_create("write");
    tcase_add_checked_fixture(w, setup, teardown);
    write_tests_in_write(w);
    suite_add_tcase(s, w);

    TCase *f = tcase_create("failures");
    tcase_add_checked_fixture(f, setup, teardown);
    write_tests_in_failures(f);
    suite_add_tcase(s, f);

    TCase *rd = tcase_create("reader");
    tcase_add_checked_fixture(rd, setup, teardown);
    read_tests_in_reader(rd);
    routing_tests_in_reader(rd);
    suite_add_tcase(s, rd);

    TCase *rp = tcase_create("replay");
    tcase_add_checked_fixture(rp, setup, teardown);
    read_tests_in_replay(rp);
    routing_tests_in_replay(rp);
    suite_add_tcase(s, rp);
    return s;
}

int main(void)
{
    if (!rc_test_mkdtemp(g_base, sizeof g_base, "/tmp/rc_test_h5_")) {
        perror("mkdtemp");
        return 1;
    }
    int status = rc_test_run(h5out_suite());
    rc_test_rm_rf(g_base);
    return status;
}
