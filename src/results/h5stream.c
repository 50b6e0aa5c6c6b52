/* The results file written in slices of sequences, in bounded memory
 * (ratiocheck score; results.h rc_h5_stream_*): the layout of h5out.c. */
#include <hdf5.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5w.h"
#include "util.h"

/* ------------------------------------------------------------------------ */
/* a results file written in slices of sequences (ratiocheck score)          */

struct rc_h5_stream {
    h5w w;
    const char *path;
    char dir[TMP_PATH_MAX];
    int64_t n_seq, prompt_max, gen_len;
    int n_lens;
    int64_t lens[RC_MAX_LENS_READ];
    bool ref, entropy, completion, trainer, ratiocheck;
    int64_t written; /* rows written so far */
    float *buf;      /* a slice's ratios */
    int64_t buf_n;
};

/* rows [first, first + rows) of dataset dpath (rank 1 or 2, cols per row) from data */
static rc_status rows_write(const h5w *w, const char *dpath, hid_t mtype, int rank, int64_t first, int64_t rows,
                            int64_t cols, const void *data)
{
    if (rows <= 0 || (rank == 2 && cols <= 0))
        return RC_OK;
    char wbuf[320];
    snprintf(wbuf, sizeof wbuf, "dataset %s", dpath);
    hid_t ds = -1, fspace = -1, mspace = -1;
    const hsize_t start[2] = {(hsize_t)first, 0}, count[2] = {(hsize_t)rows, (hsize_t)cols};
    rc_status st = RC_OK;
    if ((ds = H5Dopen2(w->file, dpath, H5P_DEFAULT)) < 0 || (fspace = H5Dget_space(ds)) < 0 ||
        H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
        (mspace = H5Screate_simple(rank, count, NULL)) < 0 ||
        H5Dwrite(ds, mtype, mspace, fspace, H5P_DEFAULT, data) < 0)
        st = h5_fail(w, "write", wbuf);
    if (mspace >= 0)
        H5Sclose(mspace);
    if (fspace >= 0)
        H5Sclose(fspace);
    if (ds >= 0 && H5Dclose(ds) < 0 && st == RC_OK)
        st = h5_fail(w, "close", wbuf);
    return st;
}

/* every per-sequence dataset of the layout, created at its full size */
static rc_status stream_create(rc_h5_stream *s)
{
    const h5w *w = &s->w;
    const int64_t N = s->n_seq, P = s->prompt_max, G = s->gen_len;
    hid_t g;
    const char *o = "/prompts";
    RC_TRY(group_create(w, o, &g));
    rc_status st = ds_i32_2d(w, g, o, "tokens", N, P, NULL);
    if (st == RC_OK)
        st = ds_i32_1d(w, g, o, "lengths", N, NULL);
    RC_TRY(group_close(w, g, o, st));
    o = "/rollouts";
    RC_TRY(group_create(w, o, &g));
    st = ds_i32_1d(w, g, o, "prompt_index", N, NULL);
    if (st == RC_OK)
        st = ds_i32_1d(w, g, o, "sample_index", N, NULL);
    if (st == RC_OK)
        st = ds_i32_2d(w, g, o, "tokens", N, G, NULL);
    if (st == RC_OK)
        st = ds_i32_1d(w, g, o, "lengths", N, NULL);
    if (st == RC_OK)
        st = ds_f32_2d(w, g, o, "logprob_gen", N, G, NULL);
    if (st == RC_OK)
        st = ds_f32_2d(w, g, o, "logprob_gen_processed", N, G, NULL);
    if (st == RC_OK && s->trainer)
        st = ds_f32_2d(w, g, o, "logprob_trainer", N, G, NULL);
    if (st == RC_OK && s->ratiocheck)
        st = ds_f32_2d(w, g, o, "logprob_ratiocheck", N, G, NULL);
    if (st == RC_OK && s->entropy)
        st = ds_f32_2d(w, g, o, "entropy", N, G, NULL);
    if (st == RC_OK && s->completion)
        st = ds_str_1d(w, g, o, "completion", N, NULL);
    RC_TRY(group_close(w, g, o, st));
    if (s->ref) {
        o = "/reference";
        RC_TRY(group_create(w, o, &g));
        RC_TRY(group_close(w, g, o, ds_f64_2d(w, g, o, "logprob", N, G, NULL)));
    }
    for (int i = 0; i < s->n_lens; i++) {
        char lo[64];
        snprintf(lo, sizeof lo, "/len_%04lld", (long long)s->lens[i]);
        const int64_t L = s->lens[i];
        RC_TRY(group_create(w, lo, &g));
        st = ds_f32_2d(w, g, lo, "logprob_forward", N, L, NULL);
        if (st == RC_OK)
            st = ds_f32_2d(w, g, lo, "ratio", N, L, NULL);
        if (st == RC_OK)
            st = ds_f32_2d(w, g, lo, "log_ratio", N, L, NULL);
        if (st == RC_OK)
            st = ds_f64_1d(w, g, lo, "seq_log_ratio_sum", N, NULL);
        if (st == RC_OK)
            st = ds_f64_1d(w, g, lo, "seq_log_ratio_mean", N, NULL);
        RC_TRY(group_close(w, g, lo, st));
    }
    return RC_OK;
}

rc_status rc_h5_stream_begin(const rc_results *shape, int64_t n_seq, const char *path, bool force,
                             rc_h5_stream **out)
{
    *out = NULL;
    if (!shape || !path || !path[0])
        return rc_errorf(RC_ERR_INTERNAL, "rc_h5_stream_begin: no %s", path ? "results" : "path");
    if (n_seq < 1 || shape->n_lens < 0 || shape->n_lens > RC_MAX_LENS_READ || shape->prompt_max < 0 ||
        shape->gen_len < 0)
        return rc_errorf(RC_ERR_INTERNAL, "rc_h5_stream_begin: %lld sequences, %d lengths", (long long)n_seq,
                         shape->n_lens);
    rc_h5_stream *s = NULL;
    RC_TRY(rc_calloc((void **)&s, 1, sizeof *s, "results stream"));
    s->path = path;
    s->n_seq = n_seq;
    s->prompt_max = shape->prompt_max;
    s->gen_len = shape->gen_len;
    s->n_lens = shape->n_lens;
    for (int i = 0; i < s->n_lens; i++) {
        s->lens[i] = shape->lens[i].len;
        if (s->lens[i] < 0 || s->lens[i] > s->gen_len) {
            free(s);
            return rc_errorf(RC_ERR_INTERNAL, "rc_h5_stream_begin: length %lld", (long long)s->lens[i]);
        }
    }
    s->ref = shape->logprob_ref != NULL;
    s->entropy = shape->entropy_gen != NULL;
    s->trainer = shape->logprob_trainer != NULL;
    s->ratiocheck = shape->logprob_ratiocheck != NULL;
    s->completion = shape->completion != NULL;
    pthread_mutex_lock(&g_write_lock); /* held until the end or the abort */
    rc_status st = temp_open(&s->w, path, force, s->dir, sizeof s->dir);
    if (st == RC_OK) {
        st = stream_create(s);
        if (st != RC_OK)
            temp_discard(&s->w);
    }
    if (st != RC_OK) {
        pthread_mutex_unlock(&g_write_lock);
        free(s);
        return st;
    }
    *out = s;
    return RC_OK;
}

rc_status rc_h5_stream_rows(rc_h5_stream *s, const rc_results *c)
{
    const h5w *w = &s->w;
    const int64_t first = s->written, n = c->n_seq, P = s->prompt_max, G = s->gen_len;
    if (n < 0 || first + n > s->n_seq || c->n_prompts != n || c->prompt_max != P || c->gen_len != G ||
        c->n_lens != s->n_lens || (c->logprob_ref != NULL) != s->ref || (c->entropy_gen != NULL) != s->entropy ||
        (c->logprob_trainer != NULL) != s->trainer || (c->logprob_ratiocheck != NULL) != s->ratiocheck ||
        (c->completion != NULL) != s->completion)
        return rc_errorf(RC_ERR_INTERNAL, "rc_h5_stream_rows: a slice of %lld rows unlike the file's layout",
                         (long long)n);
    for (int i = 0; i < s->n_lens; i++)
        if (c->lens[i].len != s->lens[i])
            return rc_errorf(RC_ERR_INTERNAL, "rc_h5_stream_rows: length %lld", (long long)c->lens[i].len);
    int32_t *pidx = NULL;
    RC_TRY(rc_calloc((void **)&pidx, n + 1, sizeof *pidx, "results stream"));
    for (int64_t q = 0; q < n; q++) /* every sequence its own prompt, numbered in the file */
        pidx[q] = (int32_t)(first + c->seq_prompt[q]);
    rc_status st = rows_write(w, "/prompts/tokens", H5T_NATIVE_INT32, 2, first, n, P, c->prompt_tokens);
    if (st == RC_OK)
        st = rows_write(w, "/prompts/lengths", H5T_NATIVE_INT32, 1, first, n, 1, c->prompt_len);
    if (st == RC_OK)
        st = rows_write(w, "/rollouts/prompt_index", H5T_NATIVE_INT32, 1, first, n, 1, pidx);
    free(pidx);
    if (st == RC_OK)
        st = rows_write(w, "/rollouts/sample_index", H5T_NATIVE_INT32, 1, first, n, 1, c->seq_sample);
    if (st == RC_OK)
        st = rows_write(w, "/rollouts/tokens", H5T_NATIVE_INT32, 2, first, n, G, c->gen_tokens);
    if (st == RC_OK)
        st = rows_write(w, "/rollouts/lengths", H5T_NATIVE_INT32, 1, first, n, 1, c->gen_valid);
    if (st == RC_OK)
        st = rows_write(w, "/rollouts/logprob_gen", H5T_NATIVE_FLOAT, 2, first, n, G, c->logprob_gen);
    if (st == RC_OK)
        st = rows_write(w, "/rollouts/logprob_gen_processed", H5T_NATIVE_FLOAT, 2, first, n, G,
                        c->logprob_gen_processed);
    if (st == RC_OK && s->trainer)
        st = rows_write(w, "/rollouts/logprob_trainer", H5T_NATIVE_FLOAT, 2, first, n, G, c->logprob_trainer);
    if (st == RC_OK && s->ratiocheck)
        st = rows_write(w, "/rollouts/logprob_ratiocheck", H5T_NATIVE_FLOAT, 2, first, n, G, c->logprob_ratiocheck);
    if (st == RC_OK && s->entropy)
        st = rows_write(w, "/rollouts/entropy", H5T_NATIVE_FLOAT, 2, first, n, G, c->entropy_gen);
    if (st == RC_OK && s->completion) { /* variable-length UTF-8 strings, as ds_str_1d writes them */
        const char **v = NULL;
        char **fixed = NULL;
        hid_t type = -1;
        st = utf8_rows(w, "the completions", c->completion, n, &v, &fixed);
        if (st == RC_OK && (type = utf8_vlen_type()) < 0)
            st = h5_fail(w, "write", "dataset /rollouts/completion");
        if (st == RC_OK)
            st = rows_write(w, "/rollouts/completion", type, 1, first, n, 1, v);
        if (type >= 0)
            H5Tclose(type);
        utf8_rows_free(v, fixed, n);
    }
    if (st == RC_OK && s->ref)
        st = rows_write(w, "/reference/logprob", H5T_NATIVE_DOUBLE, 2, first, n, G, c->logprob_ref);
    for (int i = 0; i < s->n_lens && st == RC_OK; i++) {
        const rc_len_result *lr = &c->lens[i];
        const int64_t L = lr->len;
        char d[96];
        if (n * L > s->buf_n) {
            free(s->buf);
            s->buf = NULL;
            s->buf_n = 0;
            RC_TRY(rc_calloc((void **)&s->buf, n * L, sizeof *s->buf, "ratio buffer"));
            s->buf_n = n * L;
        }
        float *buf = s->buf;
        snprintf(d, sizeof d, "/len_%04lld/logprob_forward", (long long)L);
        st = rows_write(w, d, H5T_NATIVE_FLOAT, 2, first, n, L, lr->logprob_fwd);
        ratio_rows(lr->logprob_fwd, c->logprob_gen, n, L, G, false, buf);
        snprintf(d, sizeof d, "/len_%04lld/ratio", (long long)L);
        if (st == RC_OK)
            st = rows_write(w, d, H5T_NATIVE_FLOAT, 2, first, n, L, buf);
        ratio_rows(lr->logprob_fwd, c->logprob_gen, n, L, G, true, buf);
        snprintf(d, sizeof d, "/len_%04lld/log_ratio", (long long)L);
        if (st == RC_OK)
            st = rows_write(w, d, H5T_NATIVE_FLOAT, 2, first, n, L, buf);
        snprintf(d, sizeof d, "/len_%04lld/seq_log_ratio_sum", (long long)L);
        if (st == RC_OK)
            st = rows_write(w, d, H5T_NATIVE_DOUBLE, 1, first, n, 1, lr->seq_log_ratio_sum);
        snprintf(d, sizeof d, "/len_%04lld/seq_log_ratio_mean", (long long)L);
        if (st == RC_OK)
            st = rows_write(w, d, H5T_NATIVE_DOUBLE, 1, first, n, 1, lr->seq_log_ratio_mean);
    }
    if (st == RC_OK)
        s->written += n;
    return st;
}

void rc_h5_stream_abort(rc_h5_stream *s)
{
    if (!s)
        return;
    temp_discard(&s->w);
    pthread_mutex_unlock(&g_write_lock);
    free(s->buf);
    free(s);
}

rc_status rc_h5_stream_finish(rc_h5_stream *s, const rc_results *r)
{
    const h5w *w = &s->w;
    rc_status st = RC_OK;
    if (s->written != s->n_seq || r->n_seq != s->n_seq || r->n_lens != s->n_lens)
        st = rc_errorf(RC_ERR_INTERNAL, "rc_h5_stream_finish: %lld of %lld rows written", (long long)s->written,
                       (long long)s->n_seq);
    if (st == RC_OK)
        st = write_root_attrs(w, r);
    for (int i = 0; i < r->n_lens && st == RC_OK; i++) {
        const rc_len_result *lr = &r->lens[i];
        char o[64];
        snprintf(o, sizeof o, "/len_%04lld", (long long)lr->len);
        hid_t g = H5Gopen2(w->file, o, H5P_DEFAULT);
        if (g < 0) {
            char wbuf[96];
            snprintf(wbuf, sizeof wbuf, "group %s", o);
            st = h5_fail(w, "open", wbuf);
            break;
        }
        st = write_len_attrs(w, g, o, lr);
        if (st == RC_OK)
            st = write_pos_arrays(w, g, o, lr);
        st = group_close(w, g, o, st);
        if (st == RC_OK)
            st = write_strata(w, o, &lr->st);
    }
    if (st == RC_OK)
        st = write_cross(w, r);
    if (st == RC_OK)
        st = write_growth(w, r);
    if (st == RC_OK)
        st = write_verdict(w, r);
    if (st == RC_OK)
        st = write_threeway(w, r);
    if (st != RC_OK) {
        rc_h5_stream_abort(s);
        return st;
    }
    st = temp_commit(&s->w, s->path, s->dir);
    pthread_mutex_unlock(&g_write_lock);
    free(s->buf);
    free(s);
    return st;
}
