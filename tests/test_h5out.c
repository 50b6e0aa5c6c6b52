/* Check suite for the HDF5 results writer (src/results/h5out.c).
 *
 * Every test builds an rc_results by hand (values from simple formulas, with
 * NaN / -1 padding, a NaN in the forward log-probs and distinct statistics),
 * writes it into a fresh temporary folder and reads everything back with the
 * HDF5 C API: types, shapes, chunking, filters, fill values, creation order,
 * and values compared bit for bit. The failure tests check that nothing is
 * left behind: no output and no temporary file.
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

/* Declared in h5out.c; to move to results.h. */

/* ------------------------------------------------------------------------ */
/* temp folders                                                             */

static char g_base[256];
static char g_dir[512];

static void setup(void)
{
    rc_test_fresh_dir(g_dir, sizeof g_dir, g_base);
}

static void teardown(void) { rc_test_rm_rf(g_dir); }

static const char *tpath(const char *name)
{
    static char bufs[4][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, PATH_MAX, "%s/%s", g_dir, name);
    return b;
}

/* Names in folder `dir`, sorted, joined by ','; "" when empty. */
static const char *dir_listing(const char *dir)
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

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    ck_assert_int_eq(fclose(f), 0);
}

static void check_text(const char *path, const char *want)
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

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    ck_assert_ptr_nonnull(p);
    return p;
}

static char *xstrdup(const char *s)
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
static rc_results *build(int64_t np, int64_t pmax, int64_t ns, int64_t gl, const int64_t *lens,
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

static rc_results *build_default(bool ref)
{
    static const int64_t lens[2] = {3, 7};
    return build(3, 4, 5, 7, lens, 2, ref);
}

static void destroy(rc_results *r)
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
static void *read_ds(hid_t loc, const char *name, hid_t ftype, hid_t mtype, size_t esz, int rank,
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
    "reference",     "backend",        "device",        "created",      "threads",       "seed",
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

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

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
static void check_file_ex(const char *path, const rc_results *r, const char *cmd, const char *model)
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

static void check_file(const char *path, const rc_results *r) { check_file_ex(path, r, NULL, NULL); }

/* ------------------------------------------------------------------------ */
/* tests: writing                                                           */

/* /len_NNNN's attribute order: every RC_LF_H5 row of rc_len_fields has its own
 * place, 1, 2, ... with no gap (write_len_attrs stops at the first missing
 * place and takes the first row of a place: a shared or skipped place would
 * drop attributes silently) */
START_TEST(test_len_attr_places)
{
    int max = 0, n = 0;
    for (size_t i = 0; i < rc_n_len_fields; i++)
        if (rc_len_fields[i].where & RC_LF_H5) {
            n++;
            max = rc_len_fields[i].h5_pos > max ? rc_len_fields[i].h5_pos : max;
            for (size_t j = 0; j < i; j++)
                if (rc_len_fields[j].where & RC_LF_H5)
                    ck_assert_msg(rc_len_fields[j].h5_pos != rc_len_fields[i].h5_pos, "%s and %s share place %d",
                                  rc_len_fields[j].name, rc_len_fields[i].name, rc_len_fields[i].h5_pos);
        }
    ck_assert_int_eq(max, n);
}
END_TEST

START_TEST(test_roundtrip_full)
{
    rc_results *r = build_default(true);
    /* sanity of the fixture: padding, a NaN in the forward pass, an identical pair */
    ck_assert_int_eq(r->gen_valid[2], 5);
    ck_assert_int_eq(r->gen_tokens[2 * 7 + 5], -1);
    ck_assert(isnan(r->logprob_gen[2 * 7 + 6]));
    ck_assert(isnan(r->lens[1].logprob_fwd[1 * 7 + 4]));
    ck_assert(!isnan(r->logprob_gen[1 * 7 + 4]));
    ck_assert(r->lens[0].logprob_fwd[0] == r->logprob_gen[0]);
    ck_assert_ptr_null(rc_h5_temp_path());

    const char *out = tpath("out.h5");
    rc_status st = rc_h5_write(r, out, false);
    ck_assert_msg(st == RC_OK, "rc_h5_write: %s", rc_last_error());
    ck_assert_ptr_null(rc_h5_temp_path());
    ck_assert_str_eq(dir_listing(g_dir), "out.h5");
    check_file(out, r);

    /* spot checks of the derived datasets against hand-computed values */
    hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, "len_0007", H5P_DEFAULT);
    float *ratio = read_ds(g, "ratio", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, 2, 5, 7);
    float *lr = read_ds(g, "log_ratio", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, 2, 5, 7);
    ck_assert(ratio[0] == 1.0f && lr[0] == 0.0f);   /* identical pair */
    ck_assert(isnan(ratio[1 * 7 + 4]) && isnan(lr[1 * 7 + 4])); /* NaN forward */
    ck_assert(isnan(ratio[2 * 7 + 5]) && isnan(lr[2 * 7 + 6])); /* past the end */
    ck_assert(!isnan(ratio[2 * 7 + 4]) && ratio[2 * 7 + 4] != 1.0f);
    free(ratio);
    free(lr);
    H5Gclose(g);
    H5Fclose(f);
    destroy(r);
}
END_TEST

START_TEST(test_no_reference)
{
    rc_results *r = build_default(false);
    const char *out = tpath("noref.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    check_file(out, r); /* includes: no /reference link, reference = "none" */
    destroy(r);
}
END_TEST

START_TEST(test_empty_run)
{
    rc_results *r = build(0, 0, 0, 0, NULL, 0, false);
    const char *out = tpath("empty.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    check_file(out, r);
    destroy(r);
}
END_TEST

START_TEST(test_no_sequences)
{
    /* zero rows but non-zero columns: [0, 7] and [0, 3] datasets */
    static const int64_t lens[1] = {3};
    rc_results *r = build(2, 3, 0, 7, lens, 1, true);
    const char *out = tpath("noseq.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    check_file(out, r);
    destroy(r);
}
END_TEST

START_TEST(test_chunking_larger)
{
    /* 300 x 1000: chunks of [65, 1000]; three lengths, two cross pairs */
    static const int64_t lens[3] = {1000, 10, 250};
    rc_results *r = build(7, 33, 300, 1000, lens, 3, true);
    const char *out = tpath("big.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    check_file(out, r);
    destroy(r);
}
END_TEST

START_TEST(test_wide_rows)
{
    /* a row longer than the chunk target: chunks of [1, 70000] */
    static const int64_t lens[1] = {70000};
    rc_results *r = build(1, 2, 3, 70000, lens, 1, false);
    const char *out = tpath("wide.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    check_file(out, r);
    destroy(r);
}
END_TEST

START_TEST(test_utf8_strings)
{
    rc_results *r = build_default(true);
    free(r->command_line);
    free(r->model_path);
    r->command_line = xstrdup("run --model /m/\xff\xfe x \xc3\xa9 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end");
    r->model_path = NULL;
    const char *out = tpath("utf8.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    /* each ill-formed byte becomes U+FFFD (EF BF BD); valid "é" is kept */
    const char *want = "run --model /m/\xef\xbf\xbd\xef\xbf\xbd x \xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd "
                       "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
                       "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
                       "\xef\xbf\xbd\xef\xbf\xbd end";
    check_file_ex(out, r, want, "");
    destroy(r);
}
END_TEST

START_TEST(test_relative_path)
{
    char cwd[PATH_MAX];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(g_dir), 0);
    rc_results *r = build_default(true);
    rc_status st = rc_h5_write(r, "rel.h5", false);
    const char *msg = rc_last_error();
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_msg(st == RC_OK, "%s", msg);
    ck_assert_str_eq(dir_listing(g_dir), "rel.h5");
    check_file(tpath("rel.h5"), r);
    destroy(r);
}
END_TEST

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s: %s", path, strerror(errno));
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    unsigned char *b = xcalloc((size_t)n, 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

START_TEST(test_reproducible)
{
    /* no time stamps in the file: the same results give the same bytes, even
     * a second later */
    rc_results *r = build_default(true);
    ck_assert_msg(rc_h5_write(r, tpath("a.h5"), false) == RC_OK, "%s", rc_last_error());
    struct timespec ts = {1, 100000000};
    nanosleep(&ts, NULL);
    ck_assert_msg(rc_h5_write(r, tpath("b.h5"), false) == RC_OK, "%s", rc_last_error());
    size_t na, nb;
    unsigned char *a = slurp(tpath("a.h5"), &na), *b = slurp(tpath("b.h5"), &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_msg(memcmp(a, b, na) == 0, "the two files differ");
    free(a);
    free(b);
    destroy(r);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* tests: overwrite rules and failures                                      */

START_TEST(test_refuse_overwrite)
{
    rc_results *r = build_default(true);
    const char *out = tpath("out.h5");
    write_text(out, "keep me");
    rc_clear_error();
    rc_status st = rc_h5_write(r, out, false);
    ck_assert_int_eq(st, RC_ERR_USAGE);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "%s exists (use --force to overwrite, or --out FILE)", out);
    ck_assert_str_eq(rc_last_error(), want);
    check_text(out, "keep me");
    ck_assert_str_eq(dir_listing(g_dir), "out.h5");
    ck_assert_ptr_null(rc_h5_temp_path());

    /* also for an existing HDF5 file and for a dangling symlink */
    const char *out2 = tpath("real.h5");
    ck_assert_int_eq(rc_h5_write(r, out2, false), RC_OK);
    ck_assert_int_eq(rc_h5_write(r, out2, false), RC_ERR_USAGE);
    const char *link = tpath("dangling.h5");
    ck_assert_int_eq(symlink("nowhere", link), 0);
    ck_assert_int_eq(rc_h5_write(r, link, false), RC_ERR_USAGE);
    ck_assert_str_eq(dir_listing(g_dir), "dangling.h5,out.h5,real.h5");
    destroy(r);
}
END_TEST

START_TEST(test_force_overwrite)
{
    rc_results *r = build_default(true);
    const char *out = tpath("out.h5");
    write_text(out, "old contents");
    ck_assert_msg(rc_h5_write(r, out, true) == RC_OK, "%s", rc_last_error());
    check_file(out, r);

    /* overwrite an existing results file with different contents */
    rc_results *r2 = build_default(false);
    r2->seed = 42;
    ck_assert_msg(rc_h5_write(r2, out, true) == RC_OK, "%s", rc_last_error());
    check_file(out, r2);
    ck_assert_str_eq(dir_listing(g_dir), "out.h5");
    ck_assert_ptr_null(rc_h5_temp_path());
    destroy(r);
    destroy(r2);
}
END_TEST

START_TEST(test_missing_folder)
{
    rc_results *r = build_default(true);
    const char *out = tpath("no/such/dir/out.h5");
    rc_status st = rc_h5_write(r, out, false);
    ck_assert_int_eq(st, RC_ERR_IO);
    const char *msg = rc_last_error();
    ck_assert_msg(strncmp(msg, out, strlen(out)) == 0, "message does not name the path: %s", msg);
    ck_assert_ptr_nonnull(strstr(msg, "No such file or directory"));
    ck_assert_ptr_null(strchr(msg, '\n'));
    ck_assert_str_eq(dir_listing(g_dir), "");
    ck_assert_ptr_null(rc_h5_temp_path());
    ck_assert_int_eq(rc_h5_write(r, out, true), RC_ERR_IO);
    ck_assert_str_eq(dir_listing(g_dir), "");

    /* a path whose folder is a regular file */
    write_text(tpath("file"), "x");
    ck_assert_int_eq(rc_h5_write(r, tpath("file/out.h5"), true), RC_ERR_IO);
    ck_assert_str_eq(dir_listing(g_dir), "file");
    /* a path ending in '/' */
    ck_assert_int_eq(rc_h5_write(r, tpath("sub/"), true), RC_ERR_IO);
    ck_assert_str_eq(dir_listing(g_dir), "file");
    destroy(r);
}
END_TEST

START_TEST(test_rename_fails)
{
    /* The output path is a non-empty folder: refused before anything is
     * written (it used to fail only at rename(), EISDIR), with or without
     * force. */
    rc_results *r = build_default(true);
    const char *out = tpath("out.h5");
    ck_assert_int_eq(mkdir(out, 0755), 0);
    write_text(tpath("out.h5/inside"), "precious");
    rc_status st = rc_h5_write(r, out, true);
    ck_assert_int_eq(st, RC_ERR_IO);
    const char *msg = rc_last_error();
    ck_assert_msg(strncmp(msg, out, strlen(out)) == 0, "message does not name the path: %s", msg);
    ck_assert_ptr_nonnull(strstr(msg, "is a folder"));
    ck_assert_ptr_null(strchr(msg, '\n'));
    ck_assert_str_eq(dir_listing(g_dir), "out.h5"); /* no temporary file left */
    ck_assert_str_eq(dir_listing(out), "inside");
    check_text(tpath("out.h5/inside"), "precious");
    ck_assert_ptr_null(rc_h5_temp_path());

    /* without force too */
    ck_assert_int_eq(rc_h5_write(r, out, false), RC_ERR_IO);
    ck_assert_str_eq(dir_listing(g_dir), "out.h5");

    /* and a later write elsewhere still works (no HDF5 state left behind) */
    ck_assert_msg(rc_h5_write(r, tpath("ok.h5"), false) == RC_OK, "%s", rc_last_error());
    check_file(tpath("ok.h5"), r);
    destroy(r);
}
END_TEST

/* Each mutation makes the results inconsistent; rc_h5_write must say
 * RC_ERR_INTERNAL and create nothing. */
typedef void (*mutate_fn)(rc_results *r);
static void m_len_too_big(rc_results *r) { r->lens[0].len = r->gen_len + 1; }
static void m_len_zero(rc_results *r) { r->lens[0].len = 0; }
static void m_len_dup(rc_results *r) { r->lens[1].len = r->lens[0].len; }
static void m_null_gen(rc_results *r) { free(r->logprob_gen); r->logprob_gen = NULL; }
static void m_null_fwd(rc_results *r) { free(r->lens[1].logprob_fwd); r->lens[1].logprob_fwd = NULL; }
static void m_null_pos(rc_results *r) { free(r->lens[0].pos_ratio_std); r->lens[0].pos_ratio_std = NULL; }
static void m_null_seq(rc_results *r) { free(r->lens[1].seq_log_ratio_mean); r->lens[1].seq_log_ratio_mean = NULL; }
static void m_valid_big(rc_results *r) { r->gen_valid[3] = (int32_t)r->gen_len + 1; }
static void m_prompt_idx(rc_results *r) { r->seq_prompt[4] = (int32_t)r->n_prompts; }
static void m_prompt_len(rc_results *r) { r->prompt_len[0] = -1; }
static void m_neg_seq(rc_results *r) { r->n_seq = -1; }
static void m_neg_lens(rc_results *r) { r->n_lens = -2; }
static void m_null_cross(rc_results *r) { r->n_cross = 1; free(r->cross); r->cross = NULL; }
static void m_unterminated(rc_results *r) { memset(r->dtype, 'x', sizeof r->dtype); }

static const struct {
    const char *name;
    mutate_fn fn;
} k_mutations[] = {
    {"len > gen_len", m_len_too_big},  {"len 0", m_len_zero},
    {"duplicate len", m_len_dup},      {"NULL logprob_gen", m_null_gen},
    {"NULL logprob_fwd", m_null_fwd},  {"NULL pos_ratio_std", m_null_pos},
    {"NULL seq_log_ratio_mean", m_null_seq},
    {"gen_valid > gen_len", m_valid_big}, {"seq_prompt out of range", m_prompt_idx},
    {"prompt_len < 0", m_prompt_len},  {"n_seq < 0", m_neg_seq},
    {"n_lens < 0", m_neg_lens},        {"NULL cross", m_null_cross},
    {"unterminated dtype", m_unterminated},
};

START_TEST(test_invalid_results)
{
    const char *out = tpath("out.h5");
    for (int i = 0; i < NELEM(k_mutations); i++) {
        rc_results *r = build_default(true);
        k_mutations[i].fn(r);
        rc_clear_error();
        rc_status st = rc_h5_write(r, out, true);
        ck_assert_msg(st == RC_ERR_INTERNAL, "%s: got %s (%s)", k_mutations[i].name,
                      rc_status_name(st), rc_last_error());
        const char *msg = rc_last_error();
        ck_assert_msg(strncmp(msg, out, strlen(out)) == 0, "%s: message does not name the path: %s",
                      k_mutations[i].name, msg);
        ck_assert_msg(strcmp(dir_listing(g_dir), "") == 0, "%s: left %s", k_mutations[i].name,
                      dir_listing(g_dir));
        ck_assert_ptr_null(rc_h5_temp_path());
        if (r->n_seq < 0)
            r->n_seq = 5;
        if (r->n_lens < 0)
            r->n_lens = 2;
        if (r->n_cross == 1 && !r->cross)
            r->n_cross = 0;
        destroy(r);
    }

    /* an invalid write over an existing file leaves that file alone */
    write_text(out, "keep me");
    rc_results *r = build_default(true);
    m_len_too_big(r);
    ck_assert_int_eq(rc_h5_write(r, out, true), RC_ERR_INTERNAL);
    check_text(out, "keep me");
    ck_assert_str_eq(dir_listing(g_dir), "out.h5");
    destroy(r);

    ck_assert_int_eq(rc_h5_write(NULL, out, true), RC_ERR_INTERNAL);
    r = build_default(true);
    ck_assert_int_eq(rc_h5_write(r, NULL, true), RC_ERR_INTERNAL);
    ck_assert_int_eq(rc_h5_write(r, "", true), RC_ERR_USAGE);
    destroy(r);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* tests: the reader (src/results/h5in.c) and --rollouts-from on hostile files       */
/*                                                                          */
/* Each test starts from a valid results file (written by rc_h5_write or by */
/* the CLI), then rewrites one dataset or attribute with the HDF5 C API and */
/* runs rc_h5_read and/or the CLI (`report`, `run --rollouts-from`) on it.   */

#define RC_CLI RC_TEST_BUILD_DIR "/src/ratiocheck"

static char g_err[8192];

/* Run `ratiocheck ARGS` from the source root; stderr goes to g_err. */
static int run_cli(const char *args)
{
    char errp[PATH_MAX + 32];
    snprintf(errp, sizeof errp, "%s/stderr.txt", g_dir);
    const char *root = getenv("RC_SOURCE_DIR");
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >/dev/null 2>'%s' </dev/null", root ? root : ".", RC_CLI, args,
             errp);
    int st = system(cmd);
    FILE *f = fopen(errp, "rb");
    size_t n = f ? fread(g_err, 1, sizeof g_err - 1, f) : 0;
    g_err[n] = '\0';
    if (f)
        fclose(f);
    unlink(errp);
    ck_assert_msg(st != -1 && WIFEXITED(st), "ratiocheck %s did not exit normally", args);
    return WEXITSTATUS(st);
}

/* stderr is exactly one line "ratiocheck: ..." that names `path` and carries
 * nothing from HDF5's own error printer */
static void assert_one_line(const char *path)
{
    size_t n = strlen(g_err);
    ck_assert_msg(n > 0 && g_err[n - 1] == '\n' && strchr(g_err, '\n') == g_err + n - 1,
                  "stderr is not one line: [%s]", g_err);
    ck_assert_msg(strncmp(g_err, "ratiocheck: ", 12) == 0, "stderr: [%s]", g_err);
    ck_assert_msg(strstr(g_err, path) != NULL, "stderr does not name %s: [%s]", path, g_err);
    ck_assert_msg(strstr(g_err, "HDF5-DIAG") == NULL, "stderr: [%s]", g_err);
}

/* the last library error is one line naming `path` */
static void assert_msg_names(const char *path)
{
    const char *m = rc_last_error();
    ck_assert_msg(strstr(m, path) != NULL, "message does not name %s: %s", path, m);
    ck_assert_msg(strchr(m, '\n') == NULL, "message is not one line: %s", m);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    unsigned char *b = slurp(from, &n);
    FILE *f = fopen(to, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", to);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    free(b);
}

/* A results file written by the CLI on the neox_parallel fixture (vocab 320,
 * 64 positions): 4 prompts (5, 3, 3, 4 tokens) x 2 samples, --len 2,4. Made
 * once per suite run (in g_base), copied to `dst` for each test. */
static void cli_results(const char *dst)
{
    char src[PATH_MAX], ids[PATH_MAX];
    snprintf(src, sizeof src, "%s/cli.h5", g_base);
    if (access(src, F_OK) != 0) {
        snprintf(ids, sizeof ids, "%s/p.ids", g_base);
        write_text(ids, "1 2 3 4 5\n10 20 30\n7 8 9\n40 41 42 43\n");
        char args[3 * PATH_MAX];
        snprintf(args, sizeof args,
                 "--model data/fixtures/neox_parallel --backend cpu --prompts '%s' --len 2,4 --samples 2 -q --out '%s'", ids, src);
        ck_assert_msg(run_cli(args) == 0, "making the CLI results file: %s", g_err);
    }
    copy_file(src, dst);
}

static hid_t h5_open_rw(const char *path)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "H5Fopen %s", path);
    return f;
}

/* Replace dataset `name` (absolute) with a new one of file type ftype and the
 * given shape; `data` (in mtype) is written unless NULL. chunked: chunks of at
 * most 1024 x 64 elements, shuffle + deflate (like the writer). */
static void put_ds(hid_t f, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims, const void *data,
                   bool chunked)
{
    if (H5Lexists(f, name, H5P_DEFAULT) > 0)
        ck_assert_int_ge(H5Ldelete(f, name, H5P_DEFAULT), 0);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunked) {
        hsize_t ch[2] = {dims[0] < 1024 ? dims[0] : 1024, rank == 2 ? (dims[1] < 64 ? dims[1] : 64) : 1};
        ch[0] = ch[0] ? ch[0] : 1;
        ch[1] = ch[1] ? ch[1] : 1;
        ck_assert_int_ge(H5Pset_chunk(dcpl, rank, ch), 0);
        ck_assert_int_ge(H5Pset_shuffle(dcpl), 0);
        ck_assert_int_ge(H5Pset_deflate(dcpl, 4), 0);
    }
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t ds = H5Dcreate2(f, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ck_assert_msg(ds >= 0, "H5Dcreate2 %s", name);
    if (data)
        ck_assert_int_ge(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Pclose(dcpl);
}

/* Replace attribute `name` of the root group: n elements (n == 0: scalar). */
static void put_attr(hid_t f, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *data)
{
    if (H5Aexists(f, name) > 0)
        ck_assert_int_ge(H5Adelete(f, name), 0);
    hid_t sp = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "H5Acreate2 %s", name);
    ck_assert_int_ge(H5Awrite(a, mtype, data), 0);
    H5Aclose(a);
    H5Sclose(sp);
}

static void put_attr_i64(hid_t f, const char *name, int64_t v)
{
    put_attr(f, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &v);
}

static hid_t vlen_str_type(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

/* Read int32 dataset `name`, set element `index` to v, write it back. */
static void patch_i32(const char *path, const char *name, int64_t index, int32_t v)
{
    hid_t f = h5_open_rw(path);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(ds >= 0, "H5Dopen2 %s", name);
    hid_t sp = H5Dget_space(ds);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    ck_assert_int_gt(n, index);
    int32_t *b = xcalloc((size_t)n, sizeof *b);
    ck_assert_int_ge(H5Dread(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, b), 0);
    b[index] = v;
    ck_assert_int_ge(H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, b), 0);
    free(b);
    H5Sclose(sp);
    H5Dclose(ds);
    H5Fclose(f);
}

static int32_t get_i32(const char *path, const char *name, int64_t index)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(ds >= 0, "H5Dopen2 %s", name);
    hid_t sp = H5Dget_space(ds);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    ck_assert_int_gt(n, index);
    int32_t *b = xcalloc((size_t)n, sizeof *b);
    ck_assert_int_ge(H5Dread(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, b), 0);
    int32_t v = b[index];
    free(b);
    H5Sclose(sp);
    H5Dclose(ds);
    H5Fclose(f);
    return v;
}

/* `run --rollouts-from FILE` on neox_parallel (or `model`); returns the exit code */
static int replay(const char *file, const char *model)
{
    char args[3 * PATH_MAX];
    snprintf(args, sizeof args, "--model data/fixtures/%s --backend cpu --rollouts-from '%s' --len 2,4 -q --out '%s' --force",
             model ? model : "neox_parallel", file, tpath("replayed.h5"));
    return run_cli(args);
}

static int report(const char *file)
{
    char args[PATH_MAX + 32];
    snprintf(args, sizeof args, "report '%s'", file);
    return run_cli(args);
}

/* --- the control: the CLI's own file reads, reports and replays --- */
START_TEST(test_replay_ok)
{
    const char *a = tpath("a.h5");
    cli_results(a);
    rc_results r;
    ck_assert_msg(rc_h5_read(a, &r) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(r.n_seq, 8);
    ck_assert_int_eq(r.prompt_max, 5);
    ck_assert_int_eq(rc_results_check_replay(&r, a, 320, 64), RC_OK);
    rc_results_free(&r);
    ck_assert_int_eq(report(a), 0);
    ck_assert_int_eq(replay(a, NULL), 0);
    char args[3 * PATH_MAX];
    snprintf(args, sizeof args, "diff '%s' '%s'", a, tpath("replayed.h5"));
    ck_assert_msg(run_cli(args) == 0, "%s", g_err);
}
END_TEST

/* defect 1: replayed generated token ids index log-prob rows unchecked */
START_TEST(test_replay_token_negative)
{
    const char *a = tpath("a.h5");
    cli_results(a);
    patch_i32(a, "/rollouts/tokens", 1, -5); /* sequence 0, position 1: valid */
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    ck_assert_msg(strstr(g_err, "-5") != NULL, "%s", g_err);
}
END_TEST

START_TEST(test_replay_token_vocab)
{
    const char *a = tpath("a.h5");
    cli_results(a);
    patch_i32(a, "/rollouts/tokens", 4 * 3 + 2, 320); /* sequence 3, position 2; vocab is 320 */
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    ck_assert_msg(strstr(g_err, "vocabulary") != NULL, "%s", g_err);
    patch_i32(a, "/rollouts/tokens", 4 * 3 + 2, 1 << 30);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
}
END_TEST

START_TEST(test_replay_larger_vocab)
{
    /* a rollout of a 320-token model replayed in neox_sequential (288 tokens);
     * the sampled ids already go past 287, and one surely does */
    const char *a = tpath("a.h5");
    cli_results(a);
    patch_i32(a, "/rollouts/tokens", 4 * 5 + 1, 300);
    ck_assert_int_eq(replay(a, "neox_sequential"), 4);
    assert_one_line(a);
    ck_assert_msg(strstr(g_err, "vocabulary [0, 288)") != NULL, "%s", g_err);
}
END_TEST

START_TEST(test_replay_float_tokens)
{
    /* /rollouts/tokens stored as floats, one of them NaN */
    const char *a = tpath("a.h5");
    cli_results(a);
    float tok[8 * 4];
    for (int i = 0; i < 8 * 4; i++)
        tok[i] = (float)get_i32(a, "/rollouts/tokens", i);
    tok[5] = NAN;
    hid_t f = h5_open_rw(a);
    hsize_t dims[2] = {8, 4};
    put_ds(f, "/rollouts/tokens", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, dims, tok, true);
    H5Fclose(f);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    ck_assert_msg(strstr(g_err, "/rollouts/tokens") != NULL, "%s", g_err);
    ck_assert_int_eq(report(a), 4);
    assert_one_line(a);
}
END_TEST

START_TEST(test_replay_prompt_len)
{
    const char *a = tpath("a.h5");
    cli_results(a);
    /* prompt 1 claims 8 tokens in rows of 5: the prompt copy would run into
     * the next prompt (or past the end for the last one) */
    patch_i32(a, "/prompts/lengths", 3, 8);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    ck_assert_int_eq(report(a), 4);
    assert_one_line(a);
    rc_results r;
    ck_assert_int_eq(rc_h5_read(a, &r), RC_ERR_FORMAT);
    assert_msg_names(a);
    /* an empty prompt, and a negative length */
    patch_i32(a, "/prompts/lengths", 3, 0);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    patch_i32(a, "/prompts/lengths", 3, -2);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
}
END_TEST

START_TEST(test_replay_prompt_context)
{
    /* prompts of 70 tokens: longer than the model's 64 positions */
    const char *a = tpath("a.h5");
    cli_results(a);
    int32_t tok[4 * 70], len[4] = {70, 70, 70, 70};
    for (int i = 0; i < 4 * 70; i++)
        tok[i] = i % 300;
    hid_t f = h5_open_rw(a);
    hsize_t d2[2] = {4, 70}, d1[1] = {4};
    put_ds(f, "/prompts/tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d2, tok, true);
    put_ds(f, "/prompts/lengths", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, len, false);
    H5Fclose(f);
    ck_assert_int_eq(report(a), 0); /* a valid file... */
    ck_assert_int_eq(replay(a, NULL), 4); /* ...that this model cannot replay */
    assert_one_line(a);
    ck_assert_msg(strstr(g_err, "64") != NULL, "%s", g_err);
}
END_TEST

START_TEST(test_replay_prompt_token)
{
    const char *a = tpath("a.h5");
    cli_results(a);
    patch_i32(a, "/prompts/tokens", 5 + 1, -7); /* prompt 1, position 1 */
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    patch_i32(a, "/prompts/tokens", 5 + 1, 320);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
}
END_TEST

START_TEST(test_replay_samples_overflow)
{
    /* 4 prompts x (2^62 + 2) samples wraps to 8 = num_sequences in int64 */
    const char *a = tpath("a.h5");
    cli_results(a);
    hid_t f = h5_open_rw(a);
    put_attr_i64(f, "samples", ((int64_t)1 << 62) + 2);
    H5Fclose(f);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    ck_assert_int_eq(report(a), 4);
    assert_one_line(a);
    f = h5_open_rw(a);
    put_attr_i64(f, "samples", -3);
    H5Fclose(f);
    ck_assert_int_eq(report(a), 4);
    assert_one_line(a);
}
END_TEST

START_TEST(test_replay_seq_mapping)
{
    /* sequence 0 claims prompt 1: the replay pairs tokens with prompts by
     * position (s / samples), so the file must agree */
    const char *a = tpath("a.h5");
    cli_results(a);
    patch_i32(a, "/rollouts/prompt_index", 0, 1);
    ck_assert_int_eq(report(a), 0); /* a valid file for report */
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
}
END_TEST

/* rc_run_check itself checks replayed ids before generate() indexes log-prob
 * rows with them (whoever calls it) */
START_TEST(test_run_check_forced)
{
    char p[PATH_MAX];
    rc_model *m = NULL;
    rc_test_source_path(p, sizeof p, "data/fixtures/neox_parallel");
    ck_assert_msg(rc_model_load(p, &m) == RC_OK, "%s", rc_last_error());
    static const int32_t toks[2 * 3] = {1, 5, 9, 33, 2, -1};
    static const int32_t lens[2] = {3, 2};
    int32_t forced[4 * 5], valid[4] = {5, 5, 3, 5};
    for (int i = 0; i < 4 * 5; i++)
        forced[i] = (i % 5) < valid[i / 5] ? 10 + i : -1;
    rc_rollout_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_prompts = 2;
    cfg.prompt_max = 3;
    cfg.prompt_tokens = toks;
    cfg.prompt_len = lens;
    cfg.samples = 2;
    cfg.batch = 4;
    cfg.n_lens = 1;
    cfg.lens[0] = 4;
    cfg.sampling.top_k = 0;
    cfg.sampling.top_p = 1.0;
    cfg.num = rc_numerics_fp32();
    cfg.forced_tokens = forced;
    cfg.forced_valid = valid;
    cfg.forced_len = 5;
    rc_backend *be = NULL;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    rc_results r;
    memset(&r, 0, sizeof r);
    ck_assert_msg(rc_run_check(m, be, NULL, &cfg, NULL, NULL, NULL, &r) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(r.gen_tokens[1 * 4 + 2], forced[1 * 5 + 2]); /* replayed */
    ck_assert_int_eq(r.gen_valid[2], 3);
    rc_results_free(&r);
    static const struct {
        int at;
        int32_t id, valid2;
    } bad[] = {{1 * 5 + 2, -5, 3}, {3 * 5 + 0, 320, 3}, {2 * 5 + 1, 1 << 30, 3}, {0, 10, 6}, {0, 10, -1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t f2[4 * 5], v2[4];
        memcpy(f2, forced, sizeof f2);
        memcpy(v2, valid, sizeof v2);
        f2[bad[i].at] = bad[i].id;
        v2[2] = bad[i].valid2;
        cfg.forced_tokens = f2;
        cfg.forced_valid = v2;
        memset(&r, 0, sizeof r);
        rc_clear_error();
        rc_status s = rc_run_check(m, be, NULL, &cfg, NULL, NULL, NULL, &r);
        ck_assert_msg(s == RC_ERR_FORMAT, "case %zu: %s (%s)", i, rc_status_name(s), rc_last_error());
        ck_assert_msg(strstr(rc_last_error(), "replayed rollout") != NULL, "case %zu: %s", i, rc_last_error());
        rc_results_free(&r);
    }
    rc_backend_destroy(be);
    rc_model_free(m);
}
END_TEST

/* defect 2: datasets are read into buffers sized by attributes */
static const char *write_default_with_text(void)
{
    rc_results *r = build_default(false);
    r->prompt_text = xcalloc(3, sizeof(char *));
    r->completion = xcalloc(5, sizeof(char *));
    for (int i = 0; i < 3; i++)
        r->prompt_text[i] = xstrdup("a prompt");
    for (int i = 0; i < 5; i++)
        r->completion[i] = xstrdup("a completion");
    const char *out = tpath("t.h5");
    ck_assert_msg(rc_h5_write(r, out, true) == RC_OK, "%s", rc_last_error());
    for (int i = 0; i < 3; i++)
        free(r->prompt_text[i]);
    for (int i = 0; i < 5; i++)
        free(r->completion[i]);
    free(r->prompt_text);
    free(r->completion);
    destroy(r);
    return out;
}

static void expect_read_error(const char *path, rc_status want, const char *mention)
{
    rc_results r;
    rc_clear_error();
    rc_status st = rc_h5_read(path, &r);
    ck_assert_msg(st == want, "rc_h5_read: got %s, want %s (%s)", rc_status_name(st), rc_status_name(want),
                  rc_last_error());
    assert_msg_names(path);
    if (mention)
        ck_assert_msg(strstr(rc_last_error(), mention) != NULL, "message does not mention %s: %s", mention,
                      rc_last_error());
}

/* files of earlier versions still read: no `device` attribute (before the
 * CUDA backend), /reference/logprob in float32 (before --reference fp64), no
 * text datasets (before text prompts) */
START_TEST(test_read_older_layouts)
{
    rc_results *r = build_default(true);
    const char *t = tpath("old.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    hid_t f = h5_open_rw(t);
    ck_assert_int_ge(H5Adelete(f, "device"), 0);
    float ref32[5 * 7];
    for (int i = 0; i < 5 * 7; i++)
        ref32[i] = (float)r->logprob_ref[i];
    hsize_t d[2] = {5, 7};
    put_ds(f, "/reference/logprob", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d, ref32, true);
    ck_assert_int_ge(H5Ldelete(f, "/rollouts/entropy", H5P_DEFAULT), 0); /* before the strata */
    ck_assert_int_ge(H5Ldelete(f, "/growth", H5P_DEFAULT), 0);
    H5Fclose(f);
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    ck_assert_ptr_null(back.entropy_gen);
    ck_assert(back.lens[0].st.strata[RC_STRATA_PROB].present);
    ck_assert(!back.lens[0].st.strata[RC_STRATA_ENTROPY].present);
    ck_assert_str_eq(back.device, "");
    ck_assert_ptr_null(back.prompt_text);
    ck_assert_ptr_null(back.completion);
    ck_assert(back.logprob_ref[3] == (double)ref32[3]);
    rc_results_free(&back);
    destroy(r);
}
END_TEST

START_TEST(test_read_text_extent)
{
    const char *t = write_default_with_text();
    rc_results r;
    ck_assert_msg(rc_h5_read(t, &r) == RC_OK, "%s", rc_last_error());
    ck_assert_str_eq(r.prompt_text[2], "a prompt");
    ck_assert_str_eq(r.completion[4], "a completion");
    rc_results_free(&r);
    /* 64 prompt texts for 3 prompts */
    const char *many[64];
    for (int i = 0; i < 64; i++)
        many[i] = "overflow";
    hid_t f = h5_open_rw(t), st = vlen_str_type();
    hsize_t d[1] = {64};
    put_ds(f, "/prompts/text", st, st, 1, d, many, false);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/prompts/text");
    ck_assert_int_eq(report(t), 4);
    assert_one_line(t);
    /* and too few */
    f = h5_open_rw(t);
    d[0] = 2;
    put_ds(f, "/prompts/text", st, st, 1, d, many, false);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/prompts/text");
    H5Tclose(st);
}
END_TEST

START_TEST(test_read_completion_shape)
{
    const char *t = write_default_with_text();
    const char *many[5 * 8];
    for (int i = 0; i < 5 * 8; i++)
        many[i] = "x";
    hid_t f = h5_open_rw(t), st = vlen_str_type();
    hsize_t d[2] = {5, 8}; /* rank 2 */
    put_ds(f, "/rollouts/completion", st, st, 2, d, many, false);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/completion");
    /* integers where strings belong */
    int32_t ints[5] = {1, 2, 3, 4, 5};
    f = h5_open_rw(t);
    d[0] = 5;
    put_ds(f, "/rollouts/completion", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d, ints, false);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/completion");
    H5Tclose(st);
}
END_TEST

/* /rollouts/entropy must be [S, T] floats like the log-probs */
START_TEST(test_read_entropy_shape)
{
    rc_results *r = build_default(true);
    const char *t = tpath("ent.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    ck_assert_mem_eq(back.entropy_gen, r->entropy_gen, 5 * 7 * sizeof(float));
    ck_assert(back.lens[0].st.strata[RC_STRATA_ENTROPY].present);
    rc_results_free(&back);
    float v[5 * 8] = {0};
    hsize_t d[2] = {5, 8}; /* one column too many */
    hid_t f = h5_open_rw(t);
    put_ds(f, "/rollouts/entropy", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d, v, true);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/entropy");
    int32_t ints[5 * 7] = {0};
    d[1] = 7; /* integers where floats belong */
    f = h5_open_rw(t);
    put_ds(f, "/rollouts/entropy", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d, ints, true);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/entropy");
    destroy(r);
}
END_TEST

START_TEST(test_read_attr_not_scalar)
{
    /* an array attribute where a scalar is read: the whole array used to be
     * read into one int64_t (or one char *) on the stack */
    const char *t = write_default_with_text();
    int64_t big[256];
    for (int i = 0; i < 256; i++)
        big[i] = 0x4141414141414141LL;
    hid_t f = h5_open_rw(t);
    put_attr(f, "seed", H5T_STD_I64LE, H5T_NATIVE_INT64, 256, big);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "seed");

    t = write_default_with_text();
    const char *strs[64];
    for (int i = 0; i < 64; i++)
        strs[i] = "bf16";
    hid_t st = vlen_str_type();
    f = h5_open_rw(t);
    put_attr(f, "dtype", st, st, 64, strs);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "dtype");
    ck_assert_int_eq(report(t), 4);
    assert_one_line(t);
    H5Tclose(st);
}
END_TEST

START_TEST(test_read_type_class)
{
    /* floats where integers belong: dataset and attribute */
    const char *t = write_default_with_text();
    double lens[5] = {7, 7, 5, 7, 7};
    hid_t f = h5_open_rw(t);
    hsize_t d[1] = {5};
    put_ds(f, "/rollouts/lengths", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, d, lens, false);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/lengths");

    t = write_default_with_text();
    double ns = 5.5;
    f = h5_open_rw(t);
    put_attr(f, "num_sequences", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &ns);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "num_sequences");

    t = write_default_with_text();
    double L[2] = {3.0, NAN};
    f = h5_open_rw(t);
    put_attr(f, "lengths", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, L);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "lengths");
}
END_TEST

START_TEST(test_read_ranges)
{
    /* values the writer never produces, used as sizes or indices */
    const char *t = write_default_with_text();
    patch_i32(t, "/prompts/lengths", 1, 5); /* prompt_max is 4 */
    expect_read_error(t, RC_ERR_FORMAT, "/prompts/lengths");

    t = write_default_with_text();
    patch_i32(t, "/rollouts/sample_index", 1, -1);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/sample_index");

    t = write_default_with_text();
    int64_t dup[2] = {7, 7};
    hid_t f = h5_open_rw(t);
    put_attr(f, "lengths", H5T_STD_I64LE, H5T_NATIVE_INT64, 2, dup);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "lengths");

    t = write_default_with_text();
    f = h5_open_rw(t);
    put_attr_i64(f, "samples", (int64_t)1 << 40);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "samples");
}
END_TEST

/* defect 3: sizes declared by a tiny file */

/* Make the results file at `path` declare S sequences of G tokens (one length,
 * G): every dataset the reader reads is replaced by a chunked, deflated one of
 * the declared shape with no chunk written, so the file stays small. */
static void declare_huge(const char *path, int64_t S, int64_t G)
{
    hid_t f = h5_open_rw(path);
    put_attr_i64(f, "num_sequences", S);
    put_attr_i64(f, "gen_len", G);
    int64_t L = G;
    put_attr(f, "lengths", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &L);
    hsize_t d1[1] = {(hsize_t)S}, d2[2] = {(hsize_t)S, (hsize_t)G};
    put_ds(f, "/rollouts/prompt_index", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, NULL, true);
    put_ds(f, "/rollouts/sample_index", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, NULL, true);
    put_ds(f, "/rollouts/lengths", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, NULL, true);
    put_ds(f, "/rollouts/tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d2, NULL, true);
    put_ds(f, "/rollouts/logprob_gen", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, NULL, true);
    put_ds(f, "/rollouts/logprob_gen_processed", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, NULL, true);
    if (H5Lexists(f, "/reference", H5P_DEFAULT) > 0)
        H5Ldelete(f, "/reference", H5P_DEFAULT);
    char g[64], n[96];
    snprintf(g, sizeof g, "/len_%04lld", (long long)G);
    snprintf(n, sizeof n, "%s/logprob_forward", g);
    if (H5Lexists(f, g, H5P_DEFAULT) <= 0) {
        hid_t gr = H5Gcreate2(f, g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        ck_assert_int_ge(gr, 0);
        H5Gclose(gr);
    }
    put_ds(f, n, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, NULL, true);
    H5Fclose(f);
}

static long maxrss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

START_TEST(test_read_declared_huge)
{
    /* 2^18 x 64 sequences declared (~ 64 MiB per array, 6 arrays) by a file
     * of a few tens of KiB */
    rc_results *r = build_default(false);
    const char *t = tpath("huge.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    destroy(r);
    declare_huge(t, (int64_t)1 << 18, 64);
    size_t n;
    free(slurp(t, &n));
    ck_assert_uint_lt(n, 128 * 1024); /* the premise: a small file (65 KiB with the verdict group) */
    long before = maxrss_kib();
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/");
    long grown = maxrss_kib() - before;
    ck_assert_msg(grown < 32 * 1024, "reading grew the resident set by %ld KiB", grown);
    ck_assert_int_eq(report(t), 4);
    assert_one_line(t);
}
END_TEST

START_TEST(test_read_too_large)
{
    /* 2^24 x 2^24 tokens: past any allocation; refused by size, naming the file */
    rc_results *r = build_default(false);
    const char *t = tpath("huge.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    destroy(r);
    declare_huge(t, (int64_t)1 << 24, (int64_t)1 << 24);
    long before = maxrss_kib();
    expect_read_error(t, RC_ERR_NOMEM, NULL);
    ck_assert_msg(maxrss_kib() - before < 32 * 1024, "reading grew the resident set by %ld KiB", maxrss_kib() - before);
    ck_assert_int_eq(report(t), 7);
    assert_one_line(t);
}
END_TEST

/* Variable-length strings live in the file's global heap, addressed by an ID
 * per element; nothing stops every element from naming the same heap object.
 * 4096 completions that all name one 64 KiB string: a file of ~340 KiB that
 * reads as 256 MiB (and then as much again in copies). */
START_TEST(test_read_shared_strings)
{
    static const int64_t lens[1] = {1};
    const int64_t S = 4096;
    rc_results *r = build(2, 4, S, 1, lens, 1, false);
    r->completion = xcalloc((size_t)S, sizeof(char *));
    r->completion[0] = xcalloc(65537, 1);
    memset(r->completion[0], 'a', 65536);
    for (int64_t s = 1; s < S; s++)
        r->completion[s] = xstrdup("b");
    const char *t = tpath("shared.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    for (int64_t s = 0; s < S; s++)
        free(r->completion[s]);
    free(r->completion);
    r->completion = NULL;
    destroy(r);
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error()); /* as written: fine */
    rc_results_free(&back);

    /* every element's heap ID (16 bytes in the file) := element 0's */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(t, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "/rollouts/completion", H5P_DEFAULT);
    haddr_t off = H5Dget_offset(ds);
    hsize_t stored = H5Dget_storage_size(ds);
    H5Dclose(ds);
    H5Fclose(f);
    ck_assert_msg(off != HADDR_UNDEF && stored == (hsize_t)S * 16, "contiguous, 16 bytes per element (%llu)",
                  (unsigned long long)stored);
    FILE *fp = fopen(t, "r+b");
    ck_assert_ptr_nonnull(fp);
    unsigned char id0[16];
    ck_assert_int_eq(fseek(fp, (long)off, SEEK_SET), 0);
    ck_assert_uint_eq(fread(id0, 1, 16, fp), 16);
    ck_assert_int_eq(fseek(fp, (long)off, SEEK_SET), 0);
    for (int64_t s = 0; s < S; s++)
        ck_assert_uint_eq(fwrite(id0, 1, 16, fp), 16);
    ck_assert_int_eq(fclose(fp), 0);
    size_t n;
    free(slurp(t, &n));
    ck_assert_uint_lt(n, 512 * 1024);

    long before = maxrss_kib();
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/completion");
    long grown = maxrss_kib() - before;
    ck_assert_msg(grown < 32 * 1024, "reading grew the resident set by %ld KiB", grown);
}
END_TEST

START_TEST(test_read_padding_ok)
{
    /* a legitimate file that compresses as well as files get: 2000 sequences
     * of up to 1024 tokens, all but one token NaN / -1 padding */
    static const int64_t lens[1] = {1024};
    rc_results *r = build(2, 4, 2000, 1024, lens, 1, true);
    for (int64_t s = 0; s < r->n_seq; s++) {
        r->seq_prompt[s] = (int32_t)(s % 2);
        r->gen_valid[s] = 1;
        for (int64_t t = 1; t < r->gen_len; t++) {
            r->gen_tokens[s * 1024 + t] = -1;
            r->logprob_gen[s * 1024 + t] = r->logprob_gen_processed[s * 1024 + t] = NAN;
            r->logprob_ref[s * 1024 + t] = NAN;
            r->lens[0].logprob_fwd[s * 1024 + t] = NAN;
        }
    }
    const char *t = tpath("pad.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    destroy(r);
    size_t n;
    free(slurp(t, &n));
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "a %zu-byte file of 2000 x 1024: %s", n, rc_last_error());
    ck_assert_int_eq(back.n_seq, 2000);
    ck_assert_int_eq(back.lens[0].st.count, 2000);
    rc_results_free(&back);
}
END_TEST

/* --- what score, --distribution and a MoE run add: /routing, /len_NNNN/ kl, tv and top1_agree, the trainer's columns --- */

/* build_default(false) (5 sequences x 7 tokens) with a routing record of lm layers, top k of e experts: on every
 * valid token the sampler picks experts 0..k-1 and the trainer 1..k (so they share k - 1), weights 1 / k */
static rc_results *build_routed(int64_t lm, int64_t k, int64_t e)
{
    rc_results *r = build_default(false);
    rc_routing *rt;
    ck_assert_msg(rc_routing_create(r->n_seq, r->gen_len, lm, k, e, &rt) == RC_OK, "%s", rc_last_error());
    for (int64_t m = 0; m < lm; m++)
        rt->layer[m] = (int32_t)(2 * m + 1);
    const int64_t G = r->gen_len;
    for (int64_t s = 0; s < r->n_seq; s++)
        for (int64_t t = 0; t < r->gen_valid[s]; t++)
            for (int64_t j = 0; j < lm * k; j++) {
                const int64_t i = (s * G + t) * lm * k + j;
                rt->experts[0][i] = (int16_t)(j % k);
                rt->experts[1][i] = (int16_t)(j % k + 1);
                rt->weights[0][i] = rt->weights[1][i] = 1.0f / (float)k;
            }
    const rc_len_result *L = &r->lens[r->n_lens - 1];
    rc_routing_compute(rt, r->logprob_gen, L->logprob_fwd, L->len);
    r->routing = rt;
    return r;
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A file may declare top_k up to 32767: the overlap of the two sides' experts was computed pairwise, O(k^2) per
 * token and layer (about 16 s of CPU for these 35 tokens at -O2; minutes for a 0.5 MB file of more tokens). It
 * is O(k) now, and gives what the definition (entries of the sampler's set the trainer's holds) gives. */
START_TEST(test_read_routing_wide_topk)
{
    const int64_t k = 32766, e = 32767;
    rc_results *r = build_routed(1, k, e);
    int64_t valid = 0;
    for (int64_t s = 0; s < r->n_seq; s++)
        valid += r->gen_valid[s];
    const char *t = tpath("wide.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    rc_routing *b = back.routing;
    ck_assert(b != NULL && b->top_k == k && b->n_experts == e);
    /* the statistics the reader computed, computed again and timed (pairwise: 4.4 s of CPU in a release build) */
    const rc_routing_stats st = b->st;
    const rc_len_result *L = &back.lens[back.n_lens - 1];
    const double c0 = cpu_seconds();
    rc_routing_compute(b, back.logprob_gen, L->logprob_fwd, L->len);
    const double cpu = cpu_seconds() - c0;
    ck_assert_msg(cpu < 1.0, "the statistics of %lld tokens of top %lld took %.2f s of CPU", (long long)valid,
                  (long long)k, cpu);
    ck_assert(!memcmp(&st, &b->st, sizeof st));
    /* the definition, by a membership table of the trainer's experts */
    char *in = xcalloc((size_t)e, 1);
    int64_t common = 0, tokens = 0;
    for (int64_t s = 0; s < back.n_seq; s++)
        for (int64_t tt = 0; tt < back.gen_valid[s]; tt++) {
            const int16_t *x = b->experts[0] + (s * back.gen_len + tt) * k, *y = b->experts[1] + (s * back.gen_len + tt) * k;
            memset(in, 0, (size_t)e);
            for (int64_t j = 0; j < k; j++)
                in[y[j]] = 1;
            for (int64_t j = 0; j < k; j++)
                common += in[x[j]];
            tokens++;
        }
    free(in);
    ck_assert_int_eq(tokens, valid);
    ck_assert_int_eq(b->st.tokens, tokens);
    ck_assert_int_eq(b->st.tokens_flip, tokens);
    ck_assert(fabs(b->st.mean_overlap - (double)common / (double)(tokens * k)) < 1e-12);
    ck_assert_int_eq(b->layer_miles[0], 0);
    rc_results_free(&back);
    destroy(r);
}
END_TEST

/* the same O(k) count on what the reader lets through: repeated experts and -1 (a side that recorded none past
 * the first slot) count as the pairwise definition counts them */
START_TEST(test_routing_overlap_repeats)
{
    rc_routing *rt;
    ck_assert(rc_routing_create(1, 3, 1, 3, 6, &rt) == RC_OK);
    const int16_t a[3][3] = {{3, 3, 5}, {2, -1, -1}, {0, 1, 2}}, b[3][3] = {{3, 4, 1}, {2, -1, 4}, {5, 4, 3}};
    int64_t want[3];
    for (int t = 0; t < 3; t++) {
        want[t] = 0;
        for (int i = 0; i < 3; i++) {
            memcpy(rt->experts[0] + t * 3, a[t], sizeof a[t]);
            memcpy(rt->experts[1] + t * 3, b[t], sizeof b[t]);
            bool hit = false;
            for (int j = 0; j < 3; j++)
                hit = hit || a[t][i] == b[t][j];
            want[t] += hit;
        }
    }
    const float z[3] = {0, 0, 0};
    rc_routing_compute(rt, z, z, 3);
    ck_assert_int_eq(rt->st.tokens, 3);
    ck_assert(fabs(rt->st.mean_overlap - (double)(want[0] + want[1] + want[2]) / 9.0) < 1e-15);
    ck_assert_int_eq(rt->layer_miles[0], (want[0] == 0) + (want[1] == 0) + (want[2] == 0));
    ck_assert_int_eq(rt->st.tokens_flip, (want[0] < 3) + (want[1] < 3) + (want[2] < 3));
    rc_routing_free(rt);
}
END_TEST

/* Set a scalar int64 attribute of group g */
static void put_group_attr_i64(const char *path, const char *group, const char *name, int64_t v)
{
    hid_t f = h5_open_rw(path);
    hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    ck_assert_msg(g >= 0, "H5Gopen2 %s", group);
    put_attr_i64(g, name, v);
    H5Gclose(g);
    H5Fclose(f);
}

/* /routing's attributes out of range, its datasets of another shape or class, experts out of range: refused,
 * one line naming the file */
START_TEST(test_read_routing_hostile)
{
    rc_results *r = build_routed(2, 2, 4);
    const char *t = tpath("routed.h5"), *c = tpath("routed_copy.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    ck_assert(back.routing != NULL && !memcmp(&back.routing->st, &r->routing->st, sizeof back.routing->st));
    rc_results_free(&back);
    static const struct {
        const char *a;
        int64_t v;
        const char *mention;
    } attrs[] = {{"moe_layers", 0, "MoE layers"},  {"moe_layers", INT64_MIN, "MoE layers"},
                 {"top_k", 5, "top 5 of 4"},      {"top_k", 0, "MoE layers"},
                 {"experts", 1, "top 2 of 1"},    {"experts", 32768, "of 32768 experts"},
                 {"moe_layers", 3, "/routing/sampler_experts"}, {"top_k", 1, "/routing/sampler_experts"}};
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        copy_file(t, c);
        put_group_attr_i64(c, "/routing", attrs[i].a, attrs[i].v);
        expect_read_error(c, RC_ERR_FORMAT, attrs[i].mention);
    }
    /* an attribute missing, or a string */
    copy_file(t, c);
    hid_t f = h5_open_rw(c);
    ck_assert_int_ge(H5Adelete_by_name(f, "/routing", "experts", H5P_DEFAULT), 0);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "experts");
    /* experts out of range (the trainer's -2; the sampler's = experts) */
    copy_file(t, c);
    patch_i32(c, "/routing/trainer_experts", 3, -2);
    expect_read_error(c, RC_ERR_FORMAT, "trainer_experts holds expert -2");
    copy_file(t, c);
    patch_i32(c, "/routing/sampler_experts", 0, 4);
    expect_read_error(c, RC_ERR_FORMAT, "sampler_experts holds expert 4");
    ck_assert_int_eq(report(c), 4);
    assert_one_line(c);
    /* layers not increasing */
    copy_file(t, c);
    patch_i32(c, "/routing/layer", 1, 1);
    expect_read_error(c, RC_ERR_FORMAT, "/routing/layer[1]");
    /* weights as integers, experts as floats, a rank-3 experts array */
    int32_t wi[5 * 7 * 2 * 2] = {0};
    float ef[5 * 7 * 2 * 2] = {0};
    hsize_t d4[4] = {5, 7, 2, 2};
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/routing/trainer_weights", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, d4, wi, false);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/routing/trainer_weights holds integers");
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/routing/sampler_experts", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, d4, ef, false);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/routing/sampler_experts holds floats");
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/routing/sampler_experts", H5T_STD_I16LE, H5T_NATIVE_INT32, 3, d4, wi, false);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/routing/sampler_experts has rank 3");
    /* a missing dataset */
    copy_file(t, c);
    f = h5_open_rw(c);
    ck_assert_int_ge(H5Ldelete(f, "/routing/trainer_weights", H5P_DEFAULT), 0);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/routing/trainer_weights is missing");
    destroy(r);
}
END_TEST

/* --distribution's arrays: a top-1 flag outside {-1, 0, 1}, a length without them, another shape */
START_TEST(test_read_dist_hostile)
{
    rc_results *r = build_default(false);
    const int64_t S = r->n_seq;
    for (int i = 0; i < r->n_lens; i++) {
        rc_len_result *lr = &r->lens[i];
        const int64_t L = lr->len;
        lr->dist_kl = xcalloc((size_t)(S * L), sizeof(double));
        lr->dist_tv = xcalloc((size_t)(S * L), sizeof(double));
        lr->dist_top1 = xcalloc((size_t)(S * L), sizeof(int32_t));
        for (int64_t s = 0; s < S; s++)
            for (int64_t tt = 0; tt < L; tt++) {
                const bool v = tt < r->gen_valid[s];
                lr->dist_kl[s * L + tt] = v ? 0.01 * (double)(tt + 1) : NAN;
                lr->dist_tv[s * L + tt] = v ? 0.002 * (double)(s + 1) : NAN;
                lr->dist_top1[s * L + tt] = v ? (int32_t)((s + tt) % 2) : -1;
            }
    }
    ck_assert(rc_compute_stats(r) == RC_OK);
    const char *t = tpath("dist.h5"), *c = tpath("dist_copy.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    ck_assert(back.lens[1].dist_top1 != NULL &&
              !memcmp(back.lens[1].dist_top1, r->lens[1].dist_top1, (size_t)(S * 7) * sizeof(int32_t)));
    rc_results_free(&back);
    /* 2 and INT32_MIN where -1, 0 or 1 belong */
    copy_file(t, c);
    patch_i32(c, "/len_0007/top1_agree", 9, 2);
    expect_read_error(c, RC_ERR_FORMAT, "/len_0007/top1_agree[1, 2] = 2 is not -1, 0 or 1");
    copy_file(t, c);
    patch_i32(c, "/len_0003/top1_agree", 0, INT32_MIN);
    expect_read_error(c, RC_ERR_FORMAT, "/len_0003/top1_agree[0, 0]");
    ck_assert_int_eq(report(c), 4);
    assert_one_line(c);
    /* the first length has them, the second not */
    copy_file(t, c);
    hid_t f = h5_open_rw(c);
    ck_assert_int_ge(H5Ldelete(f, "/len_0007/tv", H5P_DEFAULT), 0);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/len_0007/tv is missing");
    /* kl of another length's shape, and as integers */
    double kl[5 * 7] = {0};
    int32_t ki[5 * 3] = {0};
    hsize_t d[2] = {5, 7};
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/len_0003/kl", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, d, kl, true);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/len_0003/kl is 5 x 7, not 5 x 3");
    d[1] = 3;
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/len_0003/kl", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d, ki, true);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/len_0003/kl holds integers");
    destroy(r);
}
END_TEST

/* score's columns: the trainer's and ratiocheck's log-probs of another shape or class are refused; ratiocheck's
 * without the trainer's are not read (no /threeway) */
START_TEST(test_read_trainer_hostile)
{
    rc_results *r = build_default(false);
    const int64_t n = r->n_seq * r->gen_len;
    r->logprob_trainer = xcalloc((size_t)n, sizeof(float));
    r->logprob_ratiocheck = xcalloc((size_t)n, sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        r->logprob_trainer[i] = r->logprob_gen[i] - 0.001f;
        r->logprob_ratiocheck[i] = r->logprob_gen[i] + 0.002f;
    }
    r->threeway = xcalloc(1, sizeof *r->threeway);
    snprintf(r->threeway->ratiocheck, sizeof r->threeway->ratiocheck, "dtype=fp32");
    const char *t = tpath("tw.h5"), *c = tpath("tw_copy.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    ck_assert(back.threeway != NULL && !strcmp(back.threeway->ratiocheck, "dtype=fp32"));
    rc_results_free(&back);
    float v[5 * 8] = {0};
    int32_t vi[5 * 7] = {0};
    hsize_t d[2] = {5, 8};
    copy_file(t, c);
    hid_t f = h5_open_rw(c);
    put_ds(f, "/rollouts/logprob_ratiocheck", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d, v, true);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/rollouts/logprob_ratiocheck is 5 x 8, not 5 x 7");
    d[1] = 7;
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/rollouts/logprob_trainer", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d, vi, true);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/rollouts/logprob_trainer holds integers");
    /* /threeway's spec as an integer */
    copy_file(t, c);
    put_group_attr_i64(c, "/threeway", "ratiocheck", 7);
    expect_read_error(c, RC_ERR_FORMAT, "ratiocheck");
    /* ratiocheck's column without the trainer's: read as a file without either */
    copy_file(t, c);
    f = h5_open_rw(c);
    ck_assert_int_ge(H5Ldelete(f, "/rollouts/logprob_trainer", H5P_DEFAULT), 0);
    H5Fclose(f);
    ck_assert_msg(rc_h5_read(c, &back) == RC_OK, "%s", rc_last_error());
    ck_assert(back.logprob_trainer == NULL && back.logprob_ratiocheck == NULL && back.threeway == NULL);
    rc_results_free(&back);
    destroy(r);
}
END_TEST

/* `ratiocheck ARGS` from the source root, stdout into out (NUL-terminated); returns the exit code */
static int run_cli_out(const char *args, char *out, size_t cap)
{
    char outp[PATH_MAX + 32], cmd[16384];
    snprintf(outp, sizeof outp, "%s/stdout.txt", g_dir);
    const char *root = getenv("RC_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >'%s' 2>/dev/null </dev/null", root ? root : ".", RC_CLI, args, outp);
    int st = system(cmd);
    FILE *f = fopen(outp, "rb");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    unlink(outp);
    ck_assert_msg(st != -1 && WIFEXITED(st), "ratiocheck %s did not exit normally", args);
    return WEXITSTATUS(st);
}

static int cmp_i16(const void *x, const void *y)
{
    return (int)*(const int16_t *)x - (int)*(const int16_t *)y;
}

/* tokens recorded by both runs on `side`, and those whose sorted expert lists differ in some layer */
static void routing_differ(const rc_routing *a, const rc_routing *b, int side, int64_t *tokens, int64_t *differ)
{
    const int64_t Lm = a->n_layers, k = a->top_k;
    int16_t x[16], y[16];
    *tokens = *differ = 0;
    for (int64_t i = 0; i < a->n_seq * a->gen_len; i++) {
        if (a->experts[side][i * Lm * k] < 0 || b->experts[side][i * Lm * k] < 0)
            continue;
        (*tokens)++;
        bool d = false;
        for (int64_t m = 0; m < Lm; m++) {
            memcpy(x, a->experts[side] + (i * Lm + m) * k, (size_t)k * sizeof *x);
            memcpy(y, b->experts[side] + (i * Lm + m) * k, (size_t)k * sizeof *y);
            qsort(x, (size_t)k, sizeof *x, cmp_i16);
            qsort(y, (size_t)k, sizeof *y, cmp_i16);
            d = d || memcmp(x, y, (size_t)k * sizeof *x) != 0;
        }
        *differ += d;
    }
}

/* `diff` of two MoE runs: the share of tokens whose experts differ between the runs, the sampler's and the
 * trainer's (an order that differs over the same set does not count), in the table and in --json; a run
 * without a record is named */
START_TEST(test_diff_routing)
{
    rc_results *a = build_routed(2, 2, 4), *b = build_routed(2, 2, 4);
    rc_routing *rb = b->routing;
    const int64_t Lm = 2, k = 2, n = b->n_seq * b->gen_len;
    for (int64_t i = 0; i < n; i++) {
        int16_t *tr = rb->experts[1] + i * Lm * k, *sa = rb->experts[0] + i * Lm * k;
        if (tr[0] < 0)
            continue;
        if (i % 3 == 0) /* the trainer's layer 1: the same set, the other order */
            tr[2] = 2, tr[3] = 1;
        else if (i % 3 == 1) /* another expert */
            tr[2] = 3;
        if (i % 4 == 1) /* the sampler's layer 0: the same set, the other order */
            sa[0] = 1, sa[1] = 0;
        if (i % 7 == 2) /* another expert */
            sa[1] = 3;
    }
    const rc_len_result *L = &b->lens[b->n_lens - 1];
    rc_routing_compute(rb, b->logprob_gen, L->logprob_fwd, L->len);
    int64_t tok[2], dif[2];
    for (int side = 0; side < 2; side++) {
        routing_differ(a->routing, rb, side, &tok[side], &dif[side]);
        ck_assert_int_gt(dif[side], 0);
        ck_assert_int_lt(dif[side], tok[side]);
    }
    const char *pa = tpath("ra.h5"), *pb = tpath("rb.h5"), *pc = tpath("rc.h5");
    ck_assert_msg(rc_h5_write(a, pa, true) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(rc_h5_write(b, pb, true) == RC_OK, "%s", rc_last_error());
    rc_routing_free(b->routing);
    b->routing = NULL;
    ck_assert_msg(rc_h5_write(b, pc, true) == RC_OK, "%s", rc_last_error());
    static char out[65536];
    char args[3 * PATH_MAX], want[256];
    snprintf(args, sizeof args, "diff '%s' '%s' --json", pa, pb);
    ck_assert_int_eq(run_cli_out(args, out, sizeof out), 0);
    for (int side = 0; side < 2; side++) {
        const char *nm = side ? "trainer" : "sampler";
        snprintf(want, sizeof want, "\"%s_tokens\": %lld, \"%s_tokens_differ\": %lld", nm, (long long)tok[side], nm,
                 (long long)dif[side]);
        ck_assert_msg(strstr(out, want) != NULL, "no [%s] in %s", want, out);
    }
    snprintf(args, sizeof args, "diff '%s' '%s'", pa, pb);
    ck_assert_int_eq(run_cli_out(args, out, sizeof out), 0);
    snprintf(want, sizeof want, "routing, A vs B: experts differ on %lld of %lld sampler tokens", (long long)dif[0],
             (long long)tok[0]);
    ck_assert_msg(strstr(out, want) != NULL, "no [%s] in %s", want, out);
    snprintf(want, sizeof want, ", %lld of %lld trainer tokens", (long long)dif[1], (long long)tok[1]);
    ck_assert_msg(strstr(out, want) != NULL, "no [%s] in %s", want, out);
    /* a run without a record */
    snprintf(args, sizeof args, "diff '%s' '%s' --json", pa, pc);
    ck_assert_int_eq(run_cli_out(args, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\"routing\": null") != NULL, "%s", out);
    snprintf(args, sizeof args, "diff '%s' '%s'", pa, pc);
    ck_assert_int_eq(run_cli_out(args, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "not compared (only A has a routing record)") != NULL, "%s", out);
    destroy(a);
    destroy(b);
}
END_TEST

/* ------------------------------------------------------------------------ */

static Suite *h5out_suite(void)
{
    Suite *s = suite_create("h5out");

    TCase *w = tcase_create("write");
    tcase_add_checked_fixture(w, setup, teardown);
    tcase_add_test(w, test_len_attr_places);
    tcase_add_test(w, test_roundtrip_full);
    tcase_add_test(w, test_no_reference);
    tcase_add_test(w, test_empty_run);
    tcase_add_test(w, test_no_sequences);
    tcase_add_test(w, test_chunking_larger);
    tcase_add_test(w, test_wide_rows);
    tcase_add_test(w, test_utf8_strings);
    tcase_add_test(w, test_relative_path);
    tcase_add_test(w, test_reproducible);
    suite_add_tcase(s, w);

    TCase *f = tcase_create("failures");
    tcase_add_checked_fixture(f, setup, teardown);
    tcase_add_test(f, test_refuse_overwrite);
    tcase_add_test(f, test_force_overwrite);
    tcase_add_test(f, test_missing_folder);
    tcase_add_test(f, test_rename_fails);
    tcase_add_test(f, test_invalid_results);
    suite_add_tcase(s, f);

    TCase *rd = tcase_create("reader");
    tcase_add_checked_fixture(rd, setup, teardown);
    tcase_add_test(rd, test_read_older_layouts);
    tcase_add_test(rd, test_read_text_extent);
    tcase_add_test(rd, test_read_completion_shape);
    tcase_add_test(rd, test_read_entropy_shape);
    tcase_add_test(rd, test_read_attr_not_scalar);
    tcase_add_test(rd, test_read_type_class);
    tcase_add_test(rd, test_read_ranges);
    tcase_add_test(rd, test_read_declared_huge);
    tcase_add_test(rd, test_read_too_large);
    tcase_add_test(rd, test_read_padding_ok);
    tcase_add_test(rd, test_read_shared_strings);
    tcase_add_test(rd, test_read_routing_wide_topk);
    tcase_add_test(rd, test_routing_overlap_repeats);
    tcase_add_test(rd, test_read_routing_hostile);
    tcase_add_test(rd, test_read_dist_hostile);
    tcase_add_test(rd, test_read_trainer_hostile);
    suite_add_tcase(s, rd);

    TCase *rp = tcase_create("replay");
    tcase_add_checked_fixture(rp, setup, teardown);
    tcase_add_test(rp, test_replay_ok);
    tcase_add_test(rp, test_replay_token_negative);
    tcase_add_test(rp, test_replay_token_vocab);
    tcase_add_test(rp, test_replay_larger_vocab);
    tcase_add_test(rp, test_replay_float_tokens);
    tcase_add_test(rp, test_replay_prompt_len);
    tcase_add_test(rp, test_replay_prompt_context);
    tcase_add_test(rp, test_replay_prompt_token);
    tcase_add_test(rp, test_replay_samples_overflow);
    tcase_add_test(rp, test_replay_seq_mapping);
    tcase_add_test(rp, test_run_check_forced);
    tcase_add_test(rp, test_diff_routing);
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
