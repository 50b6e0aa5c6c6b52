/* h5in.c: read a ratiocheck results file (layout: top of h5out.c) back into
 * an rc_results, for `report` and `diff`. Statistics are not read: they are
 * recomputed from the stored tensors by rc_compute_stats. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "results.h"
#include "util.h"

typedef struct {
    const char *path;
    hid_t f;
} h5r;

static rc_status bad(const h5r *r, const char *what)
{
    return rc_errorf(RC_ERR_FORMAT, "%s: not a readable ratiocheck result (%s)", r->path, what);
}

static rc_status attr_string(const h5r *r, hid_t loc, const char *name, char *dst, size_t n, char **owned)
{
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0)
        return bad(r, name);
    hid_t t = H5Aget_type(a), mt = H5Tcopy(H5T_C_S1);
    rc_status st = RC_OK;
    char *v = NULL;
    if (t < 0 || mt < 0 || !H5Tis_variable_str(t) || H5Tset_size(mt, H5T_VARIABLE) < 0 ||
        H5Tset_cset(mt, H5T_CSET_UTF8) < 0 || H5Aread(a, mt, &v) < 0)
        st = bad(r, name);
    if (st == RC_OK) {
        if (owned) {
            *owned = strdup(v ? v : "");
            if (!*owned)
                st = rc_errorf(RC_ERR_NOMEM, "out of memory");
        } else {
            snprintf(dst, n, "%s", v ? v : "");
        }
    }
    if (v)
        H5free_memory(v);
    if (mt >= 0)
        H5Tclose(mt);
    if (t >= 0)
        H5Tclose(t);
    H5Aclose(a);
    return st;
}

/* scalar numeric attribute read as mtype */
static rc_status attr_num(const h5r *r, hid_t loc, const char *name, hid_t mtype, void *v)
{
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0 || H5Aread(a, mtype, v) < 0) {
        if (a >= 0)
            H5Aclose(a);
        return bad(r, name);
    }
    H5Aclose(a);
    return RC_OK;
}

static rc_status attr_i64(const h5r *r, hid_t loc, const char *name, int64_t *v)
{
    return attr_num(r, loc, name, H5T_NATIVE_INT64, v);
}

static rc_status attr_f64(const h5r *r, hid_t loc, const char *name, double *v)
{
    return attr_num(r, loc, name, H5T_NATIVE_DOUBLE, v);
}

/* read dataset `name` with dims (d0[, d1]) as mtype into fresh memory */
static rc_status read_ds(const h5r *r, const char *name, hid_t mtype, size_t esz, int rank, int64_t d0, int64_t d1,
                         void **out)
{
    *out = NULL;
    hid_t ds = H5Dopen2(r->f, name, H5P_DEFAULT);
    if (ds < 0)
        return bad(r, name);
    hid_t sp = H5Dget_space(ds);
    hsize_t dims[2] = {0, 0};
    rc_status st = RC_OK;
    if (sp < 0 || H5Sget_simple_extent_ndims(sp) != rank || H5Sget_simple_extent_dims(sp, dims, NULL) < 0 ||
        dims[0] != (hsize_t)d0 || (rank == 2 && dims[1] != (hsize_t)d1))
        st = bad(r, name);
    int64_t n = rank == 2 ? d0 * d1 : d0;
    if (st == RC_OK)
        st = rc_calloc(out, n + 1, esz, name);
    if (st == RC_OK && n > 0 && H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0)
        st = bad(r, name);
    if (sp >= 0)
        H5Sclose(sp);
    H5Dclose(ds);
    if (st != RC_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

static rc_status read_strs(const h5r *r, const char *name, int64_t n, char ***out)
{
    *out = NULL;
    if (H5Lexists(r->f, name, H5P_DEFAULT) <= 0)
        return RC_OK; /* optional */
    hid_t ds = H5Dopen2(r->f, name, H5P_DEFAULT);
    hid_t mt = H5Tcopy(H5T_C_S1);
    char **v = calloc((size_t)n + 1, sizeof *v);
    rc_status st = RC_OK;
    if (ds < 0 || mt < 0 || !v || H5Tset_size(mt, H5T_VARIABLE) < 0 || H5Tset_cset(mt, H5T_CSET_UTF8) < 0 ||
        (n > 0 && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0))
        st = bad(r, name);
    char **own = st == RC_OK ? calloc((size_t)n + 1, sizeof *own) : NULL;
    if (st == RC_OK && !own)
        st = rc_errorf(RC_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; st == RC_OK && i < n; i++)
        if (!(own[i] = strdup(v[i] ? v[i] : "")))
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; v && i < n; i++)
        if (v[i])
            H5free_memory(v[i]);
    free(v);
    if (mt >= 0)
        H5Tclose(mt);
    if (ds >= 0)
        H5Dclose(ds);
    if (st != RC_OK) {
        for (int64_t i = 0; own && i < n; i++)
            free(own[i]);
        free(own);
        return st;
    }
    *out = own;
    return RC_OK;
}

rc_status rc_h5_read(const char *path, rc_results *out)
{
    memset(out, 0, sizeof *out);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (!rc_file_exists(path))
        return rc_errorf(RC_ERR_IO, "%s: no such file", path);
    h5r r = {.path = path, .f = -1};
    if (H5Fis_hdf5(path) <= 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: not an HDF5 file", path);
    r.f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (r.f < 0)
        return rc_errorf(RC_ERR_IO, "%s: cannot open as HDF5", path);
    char fmt[64] = "";
    rc_status st = attr_string(&r, r.f, "format", fmt, sizeof fmt, NULL);
    if (st != RC_OK || strcmp(fmt, "ratiocheck-results") != 0) {
        H5Fclose(r.f);
        return rc_errorf(RC_ERR_FORMAT, "%s: not a ratiocheck result file (no format = \"ratiocheck-results\")", path);
    }
    int64_t ver = 0, stop = 0, nlens = 0;
    st = attr_i64(&r, r.f, "format_version", &ver);
    if (st == RC_OK && ver != 1)
        st = rc_errorf(RC_ERR_UNSUPPORTED, "%s: format_version %lld (this ratiocheck reads 1)", path, (long long)ver);
    struct {
        const char *n;
        char *d;
        size_t sz;
    } strs[] = {{"version", out->version, sizeof out->version},     {"model_type", out->model_type, sizeof out->model_type},
                {"dtype", out->dtype, sizeof out->dtype},           {"kernels", out->kernels, sizeof out->kernels},
                {"upcast", out->upcast, sizeof out->upcast},        {"logprob_dtype", out->logprob_dtype, sizeof out->logprob_dtype},
                {"reference", out->reference, sizeof out->reference}, {"backend", out->backend, sizeof out->backend},
                {"created", out->created, sizeof out->created}};
    for (size_t i = 0; st == RC_OK && i < sizeof strs / sizeof strs[0]; i++)
        st = attr_string(&r, r.f, strs[i].n, strs[i].d, strs[i].sz, NULL);
    if (st == RC_OK && H5Aexists(r.f, "device") > 0) /* files before the CUDA backend have none */
        st = attr_string(&r, r.f, "device", out->device, sizeof out->device, NULL);
    if (st == RC_OK)
        st = attr_string(&r, r.f, "command_line", NULL, 0, &out->command_line);
    if (st == RC_OK)
        st = attr_string(&r, r.f, "model_path", NULL, 0, &out->model_path);
    struct {
        const char *n;
        int64_t *d;
    } ints[] = {{"threads", &out->threads},         {"seed", &out->seed},           {"top_k", &out->top_k},
                {"samples", &out->samples},         {"batch", &out->batch},         {"forward_batch", &out->forward_batch},
                {"num_prompts", &out->n_prompts},   {"num_sequences", &out->n_seq}, {"gen_len", &out->gen_len},
                {"stop_at_eos", &stop}};
    for (size_t i = 0; st == RC_OK && i < sizeof ints / sizeof ints[0]; i++)
        st = attr_i64(&r, r.f, ints[i].n, ints[i].d);
    out->stop_at_eos = stop != 0;
    struct {
        const char *n;
        double *d;
    } dbls[] = {{"temperature", &out->temperature}, {"top_p", &out->top_p}, {"seconds_generate", &out->seconds_generate},
                {"seconds_forward", &out->seconds_forward}, {"seconds_total", &out->seconds_total}};
    for (size_t i = 0; st == RC_OK && i < sizeof dbls / sizeof dbls[0]; i++)
        st = attr_f64(&r, r.f, dbls[i].n, dbls[i].d);
    /* sizes come from the file: bound them before allocating */
    if (st == RC_OK && (out->n_prompts < 0 || out->n_seq < 0 || out->gen_len < 0 || out->n_prompts > (1 << 24) ||
                        out->n_seq > (1 << 24) || out->gen_len > (1 << 24)))
        st = bad(&r, "sizes");
    int64_t *lens = NULL;
    if (st == RC_OK) {
        hid_t a = H5Aopen(r.f, "lengths", H5P_DEFAULT);
        hid_t sp = a >= 0 ? H5Aget_space(a) : -1;
        hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
        nlens = n;
        if (n < 1 || n > RC_MAX_LENS_READ || !(lens = calloc((size_t)n, sizeof *lens)) ||
            H5Aread(a, H5T_NATIVE_INT64, lens) < 0)
            st = bad(&r, "lengths");
        if (sp >= 0)
            H5Sclose(sp);
        if (a >= 0)
            H5Aclose(a);
    }
    /* prompt_max from the dataset shape */
    if (st == RC_OK) {
        hid_t ds = H5Dopen2(r.f, "/prompts/tokens", H5P_DEFAULT);
        hid_t sp = ds >= 0 ? H5Dget_space(ds) : -1;
        hsize_t dims[2] = {0, 0};
        if (sp < 0 || H5Sget_simple_extent_ndims(sp) != 2 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0 ||
            dims[0] != (hsize_t)out->n_prompts || dims[1] > (1u << 24))
            st = bad(&r, "/prompts/tokens");
        out->prompt_max = (int64_t)dims[1];
        if (sp >= 0)
            H5Sclose(sp);
        if (ds >= 0)
            H5Dclose(ds);
    }
    const int64_t P = out->n_prompts, S = out->n_seq, G = out->gen_len;
    if (st == RC_OK)
        st = read_ds(&r, "/prompts/tokens", H5T_NATIVE_INT32, 4, 2, P, out->prompt_max, (void **)&out->prompt_tokens);
    if (st == RC_OK)
        st = read_ds(&r, "/prompts/lengths", H5T_NATIVE_INT32, 4, 1, P, 0, (void **)&out->prompt_len);
    if (st == RC_OK)
        st = read_ds(&r, "/rollouts/prompt_index", H5T_NATIVE_INT32, 4, 1, S, 0, (void **)&out->seq_prompt);
    if (st == RC_OK)
        st = read_ds(&r, "/rollouts/sample_index", H5T_NATIVE_INT32, 4, 1, S, 0, (void **)&out->seq_sample);
    if (st == RC_OK)
        st = read_ds(&r, "/rollouts/tokens", H5T_NATIVE_INT32, 4, 2, S, G, (void **)&out->gen_tokens);
    if (st == RC_OK)
        st = read_ds(&r, "/rollouts/lengths", H5T_NATIVE_INT32, 4, 1, S, 0, (void **)&out->gen_valid);
    if (st == RC_OK)
        st = read_ds(&r, "/rollouts/logprob_gen", H5T_NATIVE_FLOAT, 4, 2, S, G, (void **)&out->logprob_gen);
    if (st == RC_OK)
        st = read_ds(&r, "/rollouts/logprob_gen_processed", H5T_NATIVE_FLOAT, 4, 2, S, G,
                     (void **)&out->logprob_gen_processed);
    if (st == RC_OK && H5Lexists(r.f, "/reference", H5P_DEFAULT) > 0)
        st = read_ds(&r, "/reference/logprob", H5T_NATIVE_DOUBLE, 8, 2, S, G, (void **)&out->logprob_ref);
    if (st == RC_OK)
        st = read_strs(&r, "/prompts/text", P, &out->prompt_text);
    if (st == RC_OK)
        st = read_strs(&r, "/rollouts/completion", S, &out->completion);
    /* validate indices before anything uses them */
    for (int64_t i = 0; st == RC_OK && i < S; i++)
        if (out->seq_prompt[i] < 0 || out->seq_prompt[i] >= P || out->gen_valid[i] < 0 || out->gen_valid[i] > G)
            st = bad(&r, "/rollouts indices");
    if (st == RC_OK && (st = rc_calloc((void **)&out->lens, nlens, sizeof *out->lens, "results")) == RC_OK) {
        out->n_lens = (int)nlens;
        for (int i = 0; st == RC_OK && i < out->n_lens; i++) {
            out->lens[i].len = lens[i];
            char name[64];
            snprintf(name, sizeof name, "/len_%04lld/logprob_forward", (long long)lens[i]);
            if (lens[i] < 1 || lens[i] > G)
                st = bad(&r, "lengths");
            else
                st = read_ds(&r, name, H5T_NATIVE_FLOAT, 4, 2, S, lens[i], (void **)&out->lens[i].logprob_fwd);
        }
    }
    free(lens);
    H5Fclose(r.f);
    if (st == RC_OK)
        st = rc_compute_stats(out);
    if (st != RC_OK)
        rc_results_free(out);
    return st;
}
