/* h5in.c: read a ratiocheck results file (layout: top of h5out.c) back into
 * an rc_results, for `report`, `diff` and `run --rollouts-from`. Statistics
 * are not read: they are recomputed from the stored tensors by
 * rc_compute_stats.
 *
 * The file may be hostile. Nothing read from it is used before it is checked:
 *  - attributes: one value (scalar or [1]) of the expected type class
 *    (integers for counts, which are then range-checked); `lengths` is 1..64
 *    distinct integers in 1..gen_len;
 *  - the sizes from the attributes are multiplied with overflow checks, and
 *    the bytes the arrays would take are capped at RC_MAX_READ_BYTES (exit 7);
 *  - every dataset goes through open_ds(): rank, extent (equal to the one the
 *    attributes declare), type class, layout (contiguous, chunked or compact,
 *    no external files, no virtual datasets) and filters (deflate, shuffle,
 *    fletcher32 only), and its declared size against the storage it has in
 *    the file (below), all before anything is allocated;
 *  - variable-length strings: their total size (sized one string at a time)
 *    must fit in the file, since elements may all name one heap object;
 *  - values used as indices (prompt lengths, prompt indices, valid counts)
 *    are range-checked after reading; rc_results_check_replay checks the token
 *    ids against the replaying model.
 *
 * Storage bound. HDF5 chunked datasets need no storage for chunks that were
 * never written (they read as the fill value), so a 15 KB file can declare
 * 4M x 64 arrays. Every dataset must therefore hold enough stored bytes for
 * its declared extent: raw bytes (elements x file type size) <= stored bytes
 * without a deflate filter, and <= RC_DEFLATE_MAX_RATIO x stored bytes with
 * one. 1032:1 is the most DEFLATE can ever expand (a 258-byte match coded in
 * 2 bits), and the writer writes every chunk, so every file it wrote meets
 * the bound, even a run that is almost all NaN padding (which compresses
 * about 500:1 after shuffle). Shuffle and fletcher32 do not shrink data.
 * The storage HDF5 reports per dataset is also summed over the datasets read
 * and must not exceed the file's size (a hostile chunk index can point many
 * chunks at the same bytes). So reading a file takes at most about
 * 1032 x 8 x its size in memory, whatever it declares.
 *
 * Every error is one line naming the file; HDF5's own error printing is off. */
#include <errno.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "results.h"
#include "routing.h"
#include "util.h"

/* The most a DEFLATE stream can expand: 258 bytes from a 2-bit code. */
#define RC_DEFLATE_MAX_RATIO 1032u
/* Sanity cap on the arrays one results file may make the reader allocate
 * (the run that wrote it held them all in memory too). */
#define RC_MAX_READ_BYTES ((int64_t)32 << 30)

typedef struct {
    const char *path;
    hid_t f;
    uint64_t file_size;    /* bytes */
    uint64_t storage_used; /* storage of the datasets read so far */
} h5r;

/* "PATH: not a readable ratiocheck result (WHAT)" */
__attribute__((format(printf, 3, 4))) static rc_status badf(const h5r *r, rc_status st, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    /* names from the file: rc_errorf keeps the message one line and terminal-safe */
    if (st == RC_ERR_FORMAT)
        return rc_errorf(st, "%s: not a readable ratiocheck result (%s)", r->path, what);
    return rc_errorf(st, "%s: %s", r->path, what);
}

#define BAD(r, ...) badf((r), RC_ERR_FORMAT, __VA_ARGS__)

static const char *class_name(H5T_class_t c)
{
    switch (c) {
    case H5T_INTEGER: return "integers";
    case H5T_FLOAT: return "floats";
    case H5T_STRING: return "strings";
    case H5T_COMPOUND: return "compounds";
    case H5T_ENUM: return "enums";
    case H5T_ARRAY: return "arrays";
    case H5T_VLEN: return "variable-length sequences";
    case H5T_REFERENCE: return "references";
    case H5T_OPAQUE: return "opaque data";
    case H5T_BITFIELD: return "bitfields";
    case H5T_TIME: return "times";
    default: return "an unknown type";
    }
}

/* ------------------------------------------------------------------------ */
/* attributes                                                               */

/* Open attribute `name` of loc and check that it holds one value (scalar or
 * [1]) of class c1 or c2 (`want` names them in the message). */
static rc_status attr_open(const h5r *r, hid_t loc, const char *name, H5T_class_t c1, H5T_class_t c2, const char *want,
                           hid_t *out)
{
    *out = -1;
    if (H5Aexists(loc, name) <= 0)
        return BAD(r, "attribute '%s' is missing", name);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0)
        return BAD(r, "attribute '%s' cannot be opened", name);
    hid_t sp = H5Aget_space(a), t = H5Aget_type(a);
    H5S_class_t sc = sp >= 0 ? H5Sget_simple_extent_type(sp) : H5S_NO_CLASS;
    hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    H5T_class_t tc = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    rc_status st = RC_OK;
    if (sp < 0 || t < 0)
        st = BAD(r, "attribute '%s' cannot be read", name);
    else if ((sc != H5S_SCALAR && sc != H5S_SIMPLE) || n != 1 || H5Sget_simple_extent_ndims(sp) > 1)
        st = BAD(r, "attribute '%s' holds %lld values, not one", name, (long long)(sc == H5S_NULL ? 0 : n));
    else if (tc != c1 && tc != c2)
        st = BAD(r, "attribute '%s' holds %s, not %s", name, class_name(tc), want);
    else if (tc == H5T_STRING && H5Tis_variable_str(t) <= 0)
        st = BAD(r, "attribute '%s' is a fixed-length string, not a variable-length one", name);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (st != RC_OK) {
        H5Aclose(a);
        return st;
    }
    *out = a;
    return RC_OK;
}

static rc_status attr_string(const h5r *r, hid_t loc, const char *name, char *dst, size_t n, char **owned)
{
    hid_t a;
    RC_TRY(attr_open(r, loc, name, H5T_STRING, H5T_STRING, "a string", &a));
    hid_t mt = H5Tcopy(H5T_C_S1);
    rc_status st = RC_OK;
    char *v = NULL;
    if (mt < 0 || H5Tset_size(mt, H5T_VARIABLE) < 0 || H5Tset_cset(mt, H5T_CSET_UTF8) < 0 || H5Aread(a, mt, &v) < 0)
        st = BAD(r, "attribute '%s' cannot be read", name);
    if (st == RC_OK) {
        if (owned) {
            *owned = strdup(v ? v : "");
            if (!*owned)
                st = badf(r, RC_ERR_NOMEM, "out of memory reading attribute '%s'", name);
        } else {
            snprintf(dst, n, "%s", v ? v : "");
        }
    }
    if (v)
        H5free_memory(v);
    if (mt >= 0)
        H5Tclose(mt);
    H5Aclose(a);
    return st;
}

/* one number, read as mtype; integers only where `integer` */
static rc_status attr_num(const h5r *r, hid_t loc, const char *name, bool integer, hid_t mtype, void *v)
{
    hid_t a;
    RC_TRY(attr_open(r, loc, name, H5T_INTEGER, integer ? H5T_INTEGER : H5T_FLOAT, integer ? "an integer" : "a number",
                     &a));
    rc_status st = H5Aread(a, mtype, v) < 0 ? BAD(r, "attribute '%s' cannot be read", name) : RC_OK;
    H5Aclose(a);
    return st;
}

static rc_status attr_i64(const h5r *r, hid_t loc, const char *name, int64_t *v)
{
    return attr_num(r, loc, name, true, H5T_NATIVE_INT64, v);
}

static rc_status attr_f64(const h5r *r, hid_t loc, const char *name, double *v)
{
    return attr_num(r, loc, name, false, H5T_NATIVE_DOUBLE, v);
}

/* `lengths`: 1..RC_MAX_LENS_READ integers */
static rc_status attr_lengths(const h5r *r, int64_t **out, int64_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (H5Aexists(r->f, "lengths") <= 0)
        return BAD(r, "attribute 'lengths' is missing");
    hid_t a = H5Aopen(r->f, "lengths", H5P_DEFAULT);
    hid_t sp = a >= 0 ? H5Aget_space(a) : -1, t = a >= 0 ? H5Aget_type(a) : -1;
    hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    rc_status st = RC_OK;
    int64_t *lens = NULL;
    if (a < 0 || sp < 0 || t < 0)
        st = BAD(r, "attribute 'lengths' cannot be read");
    else if (H5Sget_simple_extent_ndims(sp) > 1 || n < 1 || n > RC_MAX_LENS_READ)
        st = BAD(r, "attribute 'lengths' holds %lld values, not 1..%d", (long long)n, RC_MAX_LENS_READ);
    else if (H5Tget_class(t) != H5T_INTEGER)
        st = BAD(r, "attribute 'lengths' holds %s, not integers", class_name(H5Tget_class(t)));
    else if (!(lens = calloc((size_t)n, sizeof *lens)))
        st = badf(r, RC_ERR_NOMEM, "out of memory");
    else if (H5Aread(a, H5T_NATIVE_INT64, lens) < 0)
        st = BAD(r, "attribute 'lengths' cannot be read");
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (a >= 0)
        H5Aclose(a);
    if (st != RC_OK) {
        free(lens);
        return st;
    }
    *out = lens;
    *n_out = n;
    return RC_OK;
}

/* ------------------------------------------------------------------------ */
/* datasets                                                                 */

typedef enum { DS_INT, DS_FLOAT, DS_STR } ds_kind;

/* Open dataset `name` and check it against what the reader expects before
 * anything is allocated for it: rank, extent (d0[, d1]), type class, layout,
 * filters, and the storage bound (top of this file). The one gate for every
 * dataset the reader reads. */
static rc_status open_ds(h5r *r, const char *name, ds_kind kind, int rank, int64_t d0, int64_t d1, hid_t *out)
{
    *out = -1;
    if (H5Lexists(r->f, name, H5P_DEFAULT) <= 0)
        return BAD(r, "%s is missing", name);
    hid_t ds = H5Dopen2(r->f, name, H5P_DEFAULT);
    if (ds < 0)
        return BAD(r, "%s is not a dataset", name);
    hid_t sp = H5Dget_space(ds), t = H5Dget_type(ds), dcpl = H5Dget_create_plist(ds);
    rc_status st = RC_OK;
    hsize_t dims[H5S_MAX_RANK];
    const H5S_class_t sc = sp >= 0 ? H5Sget_simple_extent_type(sp) : H5S_NO_CLASS;
    int nd = sc == H5S_SIMPLE ? H5Sget_simple_extent_ndims(sp) : 0; /* scalar and null: rank 0 */
    if (sp < 0 || t < 0 || dcpl < 0 || nd < 0)
        st = BAD(r, "%s cannot be read", name);
    else if (nd != rank || sc != H5S_SIMPLE)
        st = BAD(r, "%s has rank %d, not %d", name, nd, rank);
    else if (H5Sget_simple_extent_dims(sp, dims, NULL) != rank)
        st = BAD(r, "%s cannot be read", name);
    else if (dims[0] != (hsize_t)d0 || (rank == 2 && dims[1] != (hsize_t)d1)) {
        if (rank == 2)
            st = BAD(r, "%s is %llu x %llu, not %lld x %lld as the attributes declare", name,
                     (unsigned long long)dims[0], (unsigned long long)dims[1], (long long)d0, (long long)d1);
        else
            st = BAD(r, "%s has %llu elements, not %lld as the attributes declare", name,
                     (unsigned long long)dims[0], (long long)d0);
    }
    /* type */
    size_t tsize = 0;
    if (st == RC_OK) {
        H5T_class_t tc = H5Tget_class(t);
        H5T_class_t want = kind == DS_INT ? H5T_INTEGER : kind == DS_FLOAT ? H5T_FLOAT : H5T_STRING;
        tsize = H5Tget_size(t);
        if (tc != want)
            st = BAD(r, "%s holds %s, not %s", name, class_name(tc), class_name(want));
        else if (kind == DS_STR && H5Tis_variable_str(t) <= 0)
            st = BAD(r, "%s holds fixed-length strings, not variable-length ones", name);
        else if (tsize < 1 || tsize > 16)
            st = BAD(r, "%s has %zu-byte elements", name, tsize);
    }
    /* layout and filters */
    bool deflate = false;
    if (st == RC_OK) {
        H5D_layout_t lay = H5Pget_layout(dcpl);
        int next = H5Pget_external_count(dcpl), nf = H5Pget_nfilters(dcpl);
        if (lay != H5D_CONTIGUOUS && lay != H5D_CHUNKED && lay != H5D_COMPACT)
            st = badf(r, RC_ERR_UNSUPPORTED, "%s has an HDF5 storage layout (%d) ratiocheck does not read", name,
                      (int)lay);
        else if (next != 0)
            st = badf(r, RC_ERR_UNSUPPORTED, "%s is stored in external files, which ratiocheck does not read", name);
        else if (nf < 0)
            st = BAD(r, "%s cannot be read", name);
        for (int i = 0; st == RC_OK && i < nf; i++) {
            unsigned flags = 0;
            size_t ncd = 0;
            H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, NULL, 0, NULL, NULL);
            if (id == H5Z_FILTER_DEFLATE)
                deflate = true;
            else if (id != H5Z_FILTER_SHUFFLE && id != H5Z_FILTER_FLETCHER32)
                st = badf(r, RC_ERR_UNSUPPORTED,
                          "%s uses HDF5 filter %d; ratiocheck reads only deflate, shuffle and fletcher32", name,
                          (int)id);
        }
    }
    /* storage bound */
    if (st == RC_OK) {
        uint64_t n = 1, raw = 0, room = 0;
        for (int i = 0; i < rank; i++)
            if (!rc_mul_u64(n, (uint64_t)dims[i], &n))
                n = UINT64_MAX;
        const uint64_t stored = (uint64_t)H5Dget_storage_size(ds);
        const uint64_t left = r->file_size > r->storage_used ? r->file_size - r->storage_used : 0;
        if (!rc_mul_u64(n, (uint64_t)tsize, &raw))
            raw = UINT64_MAX;
        if (!rc_mul_u64(stored, deflate ? RC_DEFLATE_MAX_RATIO : 1, &room))
            room = UINT64_MAX;
        if (stored > left)
            st = BAD(r, "%s claims %" PRIu64 " bytes of storage, more than the file has left (%" PRIu64 ")", name,
                     stored, left);
        else if (raw > room)
            st = BAD(r, "%s declares %" PRIu64 " bytes but stores only %" PRIu64 "%s", name, raw, stored,
                     deflate ? " (deflate expands at most 1032 times)" : "");
        else
            r->storage_used += stored;
    }
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (st != RC_OK) {
        H5Dclose(ds);
        return st;
    }
    *out = ds;
    return RC_OK;
}

/* read numeric dataset `name` with dims (d0[, d1]) as mtype into fresh memory */
static rc_status read_ds(h5r *r, const char *name, ds_kind kind, hid_t mtype, size_t esz, int rank, int64_t d0,
                         int64_t d1, void **out)
{
    *out = NULL;
    hid_t ds;
    RC_TRY(open_ds(r, name, kind, rank, d0, d1, &ds));
    int64_t n = d0;
    rc_status st = RC_OK;
    if (rank == 2 && !rc_mul_i64(d0, d1, &n))
        st = badf(r, RC_ERR_NOMEM, "%s: %lld x %lld elements is too large", name, (long long)d0, (long long)d1);
    if (st == RC_OK)
        st = rc_calloc(out, n + 1, esz, name);
    if (st == RC_OK && n > 0 && H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0)
        st = BAD(r, "%s cannot be read", name);
    H5Dclose(ds);
    if (st != RC_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

/* optional 1-D dataset of n variable-length UTF-8 strings */
static rc_status read_strs(h5r *r, const char *name, int64_t n, char ***out)
{
    *out = NULL;
    if (H5Lexists(r->f, name, H5P_DEFAULT) <= 0)
        return RC_OK; /* optional */
    hid_t ds;
    RC_TRY(open_ds(r, name, DS_STR, 1, n, 0, &ds));
    hid_t mt = H5Tcopy(H5T_C_S1), sp = H5Dget_space(ds);
    char **v = calloc((size_t)n + 1, sizeof *v);
    rc_status st = RC_OK;
    hsize_t text = 0;
    if (!v)
        st = badf(r, RC_ERR_NOMEM, "out of memory reading %s", name);
    else if (mt < 0 || sp < 0 || H5Tset_size(mt, H5T_VARIABLE) < 0 || H5Tset_cset(mt, H5T_CSET_UTF8) < 0 ||
             (n > 0 && H5Dvlen_get_buf_size(ds, mt, sp, &text) < 0))
        st = BAD(r, "%s cannot be read", name);
    /* Each element names a string in the file's global heap, and nothing
     * stops every element from naming the same one: the strings (with their
     * NULs) must fit in the file, as they do when each is stored once. Sizing
     * them reads one string at a time. */
    else if ((uint64_t)text > r->file_size)
        st = BAD(r, "%s holds %llu bytes of strings, more than the file's %llu", name, (unsigned long long)text,
                 (unsigned long long)r->file_size);
    else if (n > 0 && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)
        st = BAD(r, "%s cannot be read", name);
    if (sp >= 0)
        H5Sclose(sp);
    char **own = st == RC_OK ? calloc((size_t)n + 1, sizeof *own) : NULL;
    if (st == RC_OK && !own)
        st = badf(r, RC_ERR_NOMEM, "out of memory reading %s", name);
    for (int64_t i = 0; st == RC_OK && i < n; i++)
        if (!(own[i] = strdup(v[i] ? v[i] : "")))
            st = badf(r, RC_ERR_NOMEM, "out of memory reading %s", name);
    for (int64_t i = 0; v && i < n; i++)
        if (v[i])
            H5free_memory(v[i]);
    free(v);
    if (mt >= 0)
        H5Tclose(mt);
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

/* bytes of every array rc_h5_read and rc_compute_stats would allocate, or -1
 * on overflow */
static int64_t declared_bytes(int64_t P, int64_t Pmax, int64_t S, int64_t G, bool ref, int f32_extra, bool dist,
                              const int64_t *lens, int64_t nlens)
{
    int64_t pt, sg, t, total = 0;
    /* prompts: tokens, lengths, text pointers */
    if (!rc_mul_i64(P, Pmax, &pt) || !rc_mul_i64(pt, 4, &pt) || !rc_add_i64(total, pt, &total) ||
        !rc_mul_i64(P, 4 + 8, &t) || !rc_add_i64(total, t, &total))
        return -1;
    /* rollouts: 3 x i32 [S], completion pointers; tokens + 2 log-prob arrays (+ entropy, reference) [S, G] */
    if (!rc_mul_i64(S, 3 * 4 + 8, &t) || !rc_add_i64(total, t, &total) || !rc_mul_i64(S, G, &sg) ||
        !rc_mul_i64(sg, 3 * 4 + 4 * f32_extra + (ref ? 8 : 0), &t) || !rc_add_i64(total, t, &total))
        return -1;
    /* per length: forward log-probs [S, L], and the statistics' double scratch */
    for (int64_t i = 0; i < nlens; i++)
        if (!rc_mul_i64(S, lens[i], &t) || !rc_mul_i64(t, 4 + 8 + (dist ? 8 + 8 + 4 : 0), &t) ||
            !rc_add_i64(total, t, &total))
            return -1;
    return total;
}

/* /threeway (h5contents.c write_threeway): recomputed from /rollouts'
 * logprob_gen, logprob_trainer and logprob_ratiocheck; only ratiocheck's
 * trainer spec is read from its attributes */
static rc_status read_threeway(h5r *r, rc_results *out)
{
    RC_TRY(rc_calloc((void **)&out->threeway, 1, sizeof *out->threeway, "results"));
    rc_threeway *t = out->threeway;
    rc_status st = RC_OK;
    if (H5Lexists(r->f, "/threeway", H5P_DEFAULT) > 0) {
        hid_t g = H5Gopen2(r->f, "/threeway", H5P_DEFAULT);
        if (g < 0)
            return BAD(r, "/threeway cannot be opened");
        if (H5Aexists(g, "ratiocheck") > 0)
            st = attr_string(r, g, "ratiocheck", t->ratiocheck, sizeof t->ratiocheck, NULL);
        H5Gclose(g);
    }
    const int64_t G = out->gen_len;
    rc_threeway_acc a;
    memset(&a, 0, sizeof a);
    for (int64_t q = 0; st == RC_OK && q < out->n_seq; q++)
        for (int64_t i = q * G; i < q * G + out->gen_valid[q]; i++)
            rc_threeway_add(&a, out->logprob_gen[i], out->logprob_trainer[i], out->logprob_ratiocheck[i],
                            out->logprob_ref ? out->logprob_ref[i] : NAN);
    t->len = G;
    if (out->logprob_ref)
        snprintf(t->ref, sizeof t->ref, "%s", out->reference);
    rc_threeway_finish(&a, t);
    return st;
}

/* `ratiocheck sweep`'s rows (h5contents.c write_sweep): each setting's name,
 * sides, skip reason and flags, and its replayed log-probs over the base's
 * rollouts; their statistics are computed as the base's. Files without
 * /sweep have none. */
static rc_status read_sweep(h5r *r, rc_results *out)
{
    if (H5Lexists(r->f, "/sweep", H5P_DEFAULT) <= 0)
        return RC_OK;
    hid_t g = H5Gopen2(r->f, "/sweep", H5P_DEFAULT);
    if (g < 0)
        return BAD(r, "/sweep is not a group");
    int64_t n = 0;
    rc_status st = attr_i64(r, g, "settings", &n);
    H5Gclose(g);
    if (st != RC_OK)
        return st;
    if (n < 0 || n > 4096)
        return BAD(r, "/sweep: attribute 'settings' = %lld is outside 0..4096", (long long)n);
    RC_TRY(rc_calloc((void **)&out->sweep, (size_t)n + 1, sizeof *out->sweep, "sweep rows"));
    const int64_t S = out->n_seq, G = out->gen_len;
    for (int64_t i = 0; st == RC_OK && i < n; i++) {
        rc_sweep_row *row = &out->sweep[i];
        out->n_sweep = (int)i + 1;
        char so[64];
        snprintf(so, sizeof so, "/sweep/%02lld", (long long)i);
        hid_t sg = H5Lexists(r->f, so, H5P_DEFAULT) > 0 ? H5Gopen2(r->f, so, H5P_DEFAULT) : -1;
        if (sg < 0)
            return BAD(r, "%s is missing (attribute /sweep settings = %lld)", so, (long long)n);
        int64_t nf = 0, same = 0, inv = 0;
        st = attr_string(r, sg, "name", row->name, sizeof row->name, NULL);
        if (st == RC_OK)
            st = attr_string(r, sg, "sampler", row->sampler, sizeof row->sampler, NULL);
        if (st == RC_OK)
            st = attr_string(r, sg, "trainer", row->trainer, sizeof row->trainer, NULL);
        if (st == RC_OK)
            st = attr_string(r, sg, "skipped", row->skipped, sizeof row->skipped, NULL);
        if (st == RC_OK)
            st = attr_i64(r, sg, "noise_floor", &nf);
        if (st == RC_OK)
            st = attr_i64(r, sg, "identical_to_base", &same);
        if (st == RC_OK)
            st = attr_i64(r, sg, "batch_invariant", &inv);
        H5Gclose(sg);
        row->noise_floor = nf != 0;
        row->identical = same != 0;
        row->invariant = inv != 0;
        char name[96];
        snprintf(name, sizeof name, "%s/logprob_generation", so);
        if (st != RC_OK || row->skipped[0] || H5Lexists(r->f, name, H5P_DEFAULT) <= 0)
            continue; /* skipped: no replay */
        rc_results *q;
        RC_TRY(rc_calloc((void **)&row->res, 1, sizeof *row->res, "sweep results"));
        q = row->res;
        q->n_seq = S;
        q->gen_len = G;
        q->stat = out->stat;
        st = read_ds(r, name, DS_FLOAT, H5T_NATIVE_FLOAT, 4, 2, S, G, (void **)&q->logprob_gen);
        if (st == RC_OK)
            st = rc_calloc((void **)&q->gen_valid, (size_t)S + 1, sizeof *q->gen_valid, "sweep results");
        if (st == RC_OK && S > 0)
            memcpy(q->gen_valid, out->gen_valid, (size_t)S * sizeof *q->gen_valid);
        if (st == RC_OK)
            st = rc_calloc((void **)&q->lens, (size_t)out->n_lens, sizeof *q->lens, "sweep results");
        for (int l = 0; st == RC_OK && l < out->n_lens; l++) {
            q->n_lens = l + 1;
            q->lens[l].len = out->lens[l].len;
            snprintf(name, sizeof name, "%s/len_%04lld/logprob_forward", so, (long long)out->lens[l].len);
            st = read_ds(r, name, DS_FLOAT, H5T_NATIVE_FLOAT, 4, 2, S, out->lens[l].len,
                         (void **)&q->lens[l].logprob_fwd);
        }
    }
    return st;
}

/* /routing (a MoE run's record, routing.h; optional): the MoE layers and both sides' experts and weights,
 * [n_seq, gen_len, moe_layers, top_k] each, opened and checked (extent, storage bound) before anything is
 * allocated for them; every expert -1 or in [0, experts). The statistics are recomputed from them
 * (rc_h5_read). */
static rc_status read_routing(h5r *r, rc_results *out)
{
    if (H5Lexists(r->f, "/routing", H5P_DEFAULT) <= 0)
        return RC_OK;
    hid_t g = H5Gopen2(r->f, "/routing", H5P_DEFAULT);
    if (g < 0)
        return BAD(r, "/routing is not a group");
    int64_t Lm = 0, k = 0, E = 0;
    rc_status st = attr_i64(r, g, "moe_layers", &Lm);
    if (st == RC_OK)
        st = attr_i64(r, g, "top_k", &k);
    if (st == RC_OK)
        st = attr_i64(r, g, "experts", &E);
    H5Gclose(g);
    RC_TRY(st);
    if (Lm < 1 || Lm > 65536 || k < 1 || E < k || E > INT16_MAX)
        return BAD(r, "/routing: %lld MoE layers, top %lld of %lld experts", (long long)Lm, (long long)k,
                   (long long)E);
    static const char *const names[4] = {"/routing/sampler_experts", "/routing/trainer_experts",
                                         "/routing/sampler_weights", "/routing/trainer_weights"};
    const hsize_t want[4] = {(hsize_t)out->n_seq, (hsize_t)out->gen_len, (hsize_t)Lm, (hsize_t)k};
    hid_t ds[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 4 && st == RC_OK; i++) {
        st = open_ds(r, names[i], i < 2 ? DS_INT : DS_FLOAT, 4, out->n_seq, 0, &ds[i]);
        hsize_t d[4];
        hid_t sp = st == RC_OK ? H5Dget_space(ds[i]) : -1;
        if (st == RC_OK && (sp < 0 || H5Sget_simple_extent_dims(sp, d, NULL) != 4))
            st = BAD(r, "%s cannot be read", names[i]);
        else if (st == RC_OK && (d[1] != want[1] || d[2] != want[2] || d[3] != want[3]))
            st = BAD(r, "%s is %llu x %llu x %llu x %llu, not %llu x %llu x %llu x %llu", names[i],
                     (unsigned long long)d[0], (unsigned long long)d[1], (unsigned long long)d[2],
                     (unsigned long long)d[3], (unsigned long long)want[0], (unsigned long long)want[1],
                     (unsigned long long)want[2], (unsigned long long)want[3]);
        if (sp >= 0)
            H5Sclose(sp);
    }
    rc_routing *rt = NULL;
    int32_t *layer = NULL;
    if (st == RC_OK)
        st = read_ds(r, "/routing/layer", DS_INT, H5T_NATIVE_INT32, 4, 1, Lm, 0, (void **)&layer);
    for (int64_t m = 0; st == RC_OK && m < Lm; m++)
        if (layer[m] < 0 || (m > 0 && layer[m] <= layer[m - 1]))
            st = BAD(r, "/routing/layer[%lld] = %d is not a decoder layer after the one before", (long long)m,
                     (int)layer[m]);
    if (st == RC_OK)
        st = rc_routing_create(out->n_seq, out->gen_len, Lm, k, E, &rt);
    if (st == RC_OK)
        memcpy(rt->layer, layer, (size_t)Lm * sizeof *layer);
    const int64_t n = out->n_seq * out->gen_len * Lm * k; /* rc_routing_create checked the product */
    for (int i = 0; i < 4 && st == RC_OK; i++) {
        void *dst = i < 2 ? (void *)rt->experts[i] : (void *)rt->weights[i - 2];
        if (n > 0 && H5Dread(ds[i], i < 2 ? H5T_NATIVE_INT16 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                             dst) < 0)
            st = BAD(r, "%s cannot be read", names[i]);
    }
    for (int side = 0; side < 2 && st == RC_OK; side++)
        for (int64_t i = 0; i < n; i++)
            if (rt->experts[side][i] < -1 || rt->experts[side][i] >= E) {
                st = BAD(r, "%s holds expert %d (the model has %lld)", names[side], (int)rt->experts[side][i],
                         (long long)E);
                break;
            }
    for (int i = 0; i < 4; i++)
        if (ds[i] >= 0)
            H5Dclose(ds[i]);
    free(layer);
    if (st != RC_OK) {
        rc_routing_free(rt);
        return st;
    }
    out->routing = rt;
    return RC_OK;
}

/* a length's --distribution arrays (kl, tv, top1_agree: every length has
 * them when the first has) */
static rc_status read_dist(h5r *r, rc_len_result *lr, int64_t S)
{
    const int64_t L = lr->len;
    char name[64];
    snprintf(name, sizeof name, "/len_%04lld/kl", (long long)L);
    RC_TRY(read_ds(r, name, DS_FLOAT, H5T_NATIVE_DOUBLE, 8, 2, S, L, (void **)&lr->dist_kl));
    snprintf(name, sizeof name, "/len_%04lld/tv", (long long)L);
    RC_TRY(read_ds(r, name, DS_FLOAT, H5T_NATIVE_DOUBLE, 8, 2, S, L, (void **)&lr->dist_tv));
    snprintf(name, sizeof name, "/len_%04lld/top1_agree", (long long)L);
    RC_TRY(read_ds(r, name, DS_INT, H5T_NATIVE_INT32, 4, 2, S, L, (void **)&lr->dist_top1));
    for (int64_t k = 0; k < S * L; k++)
        if (lr->dist_top1[k] < -1 || lr->dist_top1[k] > 1)
            return BAD(r, "%s[%lld, %lld] = %d is not -1, 0 or 1", name, (long long)(k / L), (long long)(k % L),
                       (int)lr->dist_top1[k]);
    return RC_OK;
}

static rc_status read_all(h5r *r, rc_results *out)
{
    const char *path = r->path;
    char fmt[64] = "";
    rc_status st = attr_string(r, r->f, "format", fmt, sizeof fmt, NULL);
    if (st != RC_OK || strcmp(fmt, "ratiocheck-results") != 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: not a ratiocheck result file (no format = \"ratiocheck-results\")", path);
    int64_t ver = 0;
    RC_TRY(attr_i64(r, r->f, "format_version", &ver));
    if (ver != 1)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: format_version %lld (this ratiocheck reads 1)", path, (long long)ver);
    for (size_t i = 0; i < rc_n_settings; i++) { /* the run's settings (results.h) */
        const rc_setting *set = &rc_settings[i];
        if (set->optional && H5Aexists(r->f, set->name) <= 0)
            continue; /* an older file: stays "" / 0 */
        char *at = (char *)out + set->off;
        int64_t v = 0;
        switch (set->kind) {
        case RC_SET_TEXT:
            if (set->cap)
                RC_TRY(attr_string(r, r->f, set->name, at, set->cap, NULL));
            else
                RC_TRY(attr_string(r, r->f, set->name, NULL, 0, (char **)(void *)at));
            break;
        case RC_SET_I64: RC_TRY(attr_i64(r, r->f, set->name, (int64_t *)(void *)at)); break;
        case RC_SET_F64: RC_TRY(attr_f64(r, r->f, set->name, (double *)(void *)at)); break;
        case RC_SET_BOOL:
            RC_TRY(attr_i64(r, r->f, set->name, &v));
            *(bool *)(void *)at = v != 0;
            break;
        }
    }
    struct {
        const char *n;
        double *d;
    } dbls[] = {{"seconds_generate", &out->seconds_generate},
                {"seconds_forward", &out->seconds_forward}, {"seconds_total", &out->seconds_total}};
    for (size_t i = 0; i < sizeof dbls / sizeof dbls[0]; i++)
        RC_TRY(attr_f64(r, r->f, dbls[i].n, dbls[i].d));
    out->seconds_reference = 0; /* absent in files written before it */
    if (H5Aexists(r->f, "seconds_reference") > 0)
        RC_TRY(attr_f64(r, r->f, "seconds_reference", &out->seconds_reference));
    /* sizes and indices come from the file: bound them before using them */
    const int64_t lim = (int64_t)1 << 24;
    const struct {
        const char *n;
        int64_t v;
    } ranged[] = {{"num_prompts", out->n_prompts}, {"num_sequences", out->n_seq}, {"gen_len", out->gen_len},
                  {"samples", out->samples}};
    for (size_t i = 0; i < sizeof ranged / sizeof ranged[0]; i++)
        if (ranged[i].v < 0 || ranged[i].v > lim)
            return BAD(r, "attribute '%s' = %lld is outside 0..%lld", ranged[i].n, (long long)ranged[i].v,
                       (long long)lim);
    int64_t *lens = NULL, nlens = 0;
    RC_TRY(attr_lengths(r, &lens, &nlens));
    for (int64_t i = 0; st == RC_OK && i < nlens; i++) {
        if (lens[i] < 1 || lens[i] > out->gen_len)
            st = BAD(r, "attribute 'lengths' holds %lld, outside 1..gen_len (%lld)", (long long)lens[i],
                     (long long)out->gen_len);
        for (int64_t j = 0; st == RC_OK && j < i; j++)
            if (lens[j] == lens[i])
                st = BAD(r, "attribute 'lengths' holds %lld twice", (long long)lens[i]);
    }
    /* prompt_max from the dataset's shape (checked again when it is read) */
    if (st == RC_OK) {
        hid_t ds = H5Lexists(r->f, "/prompts/tokens", H5P_DEFAULT) > 0 ? H5Dopen2(r->f, "/prompts/tokens", H5P_DEFAULT)
                                                                        : -1;
        hid_t sp = ds >= 0 ? H5Dget_space(ds) : -1;
        hsize_t dims[H5S_MAX_RANK] = {0};
        if (ds < 0)
            st = BAD(r, "/prompts/tokens is missing");
        else if (sp < 0 || H5Sget_simple_extent_type(sp) != H5S_SIMPLE || H5Sget_simple_extent_ndims(sp) != 2 ||
                 H5Sget_simple_extent_dims(sp, dims, NULL) != 2)
            st = BAD(r, "/prompts/tokens is not a 2-D dataset");
        else if (dims[1] > (hsize_t)lim)
            st = BAD(r, "/prompts/tokens has rows of %llu tokens, more than %lld", (unsigned long long)dims[1],
                     (long long)lim);
        out->prompt_max = (int64_t)dims[1];
        if (sp >= 0)
            H5Sclose(sp);
        if (ds >= 0)
            H5Dclose(ds);
    }
    const int64_t P = out->n_prompts, S = out->n_seq, G = out->gen_len;
    const bool ref = H5Lexists(r->f, "/reference", H5P_DEFAULT) > 0;
    /* the sampler's entropy: files written before it have none (no entropy strata then) */
    const bool ent = H5Lexists(r->f, "/rollouts", H5P_DEFAULT) > 0 &&
                     H5Lexists(r->f, "/rollouts/entropy", H5P_DEFAULT) > 0;
    /* --distribution's per-token arrays: files without the pass (or written before it) have none */
    char dname[64];
    snprintf(dname, sizeof dname, "/len_%04lld/kl", nlens > 0 ? (long long)lens[0] : 0LL);
    const bool dist = nlens > 0 && H5Lexists(r->f, dname, H5P_DEFAULT) > 0;
    /* score of a file with trainer_logprobs: the user's trainer, and with --model ratiocheck's (absent otherwise) */
    const bool has_tr = H5Lexists(r->f, "/rollouts", H5P_DEFAULT) > 0 &&
                        H5Lexists(r->f, "/rollouts/logprob_trainer", H5P_DEFAULT) > 0;
    const bool has_rc = has_tr && H5Lexists(r->f, "/rollouts/logprob_ratiocheck", H5P_DEFAULT) > 0;
    if (st == RC_OK) {
        int64_t bytes = declared_bytes(P, out->prompt_max, S, G, ref, (int)ent + (int)has_tr + (int)has_rc, dist,
                                       lens, nlens);
        if (bytes < 0 || bytes > RC_MAX_READ_BYTES)
            st = badf(r, RC_ERR_NOMEM,
                      "declares %lld prompts x %lld tokens and %lld sequences x %lld tokens, more than the %lld GiB "
                      "ratiocheck reads",
                      (long long)P, (long long)out->prompt_max, (long long)S, (long long)G,
                      (long long)(RC_MAX_READ_BYTES >> 30));
    }
    if (st == RC_OK)
        st = read_ds(r, "/prompts/tokens", DS_INT, H5T_NATIVE_INT32, 4, 2, P, out->prompt_max,
                     (void **)&out->prompt_tokens);
    if (st == RC_OK)
        st = read_ds(r, "/prompts/lengths", DS_INT, H5T_NATIVE_INT32, 4, 1, P, 0, (void **)&out->prompt_len);
    if (st == RC_OK)
        st = read_ds(r, "/rollouts/prompt_index", DS_INT, H5T_NATIVE_INT32, 4, 1, S, 0, (void **)&out->seq_prompt);
    if (st == RC_OK)
        st = read_ds(r, "/rollouts/sample_index", DS_INT, H5T_NATIVE_INT32, 4, 1, S, 0, (void **)&out->seq_sample);
    if (st == RC_OK)
        st = read_ds(r, "/rollouts/lengths", DS_INT, H5T_NATIVE_INT32, 4, 1, S, 0, (void **)&out->gen_valid);
    /* indices, before anything uses them */
    for (int64_t p = 0; st == RC_OK && p < P; p++)
        if (out->prompt_len[p] < 0 || out->prompt_len[p] > out->prompt_max)
            st = BAD(r, "/prompts/lengths[%lld] = %d is outside 0..%lld", (long long)p, (int)out->prompt_len[p],
                     (long long)out->prompt_max);
    for (int64_t i = 0; st == RC_OK && i < S; i++) {
        if (out->seq_prompt[i] < 0 || out->seq_prompt[i] >= P)
            st = BAD(r, "/rollouts/prompt_index[%lld] = %d is not one of the %lld prompts", (long long)i,
                     (int)out->seq_prompt[i], (long long)P);
        else if (out->seq_sample[i] < 0)
            st = BAD(r, "/rollouts/sample_index[%lld] = %d is negative", (long long)i, (int)out->seq_sample[i]);
        else if (out->gen_valid[i] < 0 || out->gen_valid[i] > G)
            st = BAD(r, "/rollouts/lengths[%lld] = %d is outside 0..gen_len (%lld)", (long long)i,
                     (int)out->gen_valid[i], (long long)G);
    }
    if (st == RC_OK)
        st = read_ds(r, "/rollouts/tokens", DS_INT, H5T_NATIVE_INT32, 4, 2, S, G, (void **)&out->gen_tokens);
    if (st == RC_OK)
        st = read_ds(r, "/rollouts/logprob_gen", DS_FLOAT, H5T_NATIVE_FLOAT, 4, 2, S, G, (void **)&out->logprob_gen);
    if (st == RC_OK)
        st = read_ds(r, "/rollouts/logprob_gen_processed", DS_FLOAT, H5T_NATIVE_FLOAT, 4, 2, S, G,
                     (void **)&out->logprob_gen_processed);
    if (st == RC_OK && ent)
        st = read_ds(r, "/rollouts/entropy", DS_FLOAT, H5T_NATIVE_FLOAT, 4, 2, S, G, (void **)&out->entropy_gen);
    if (st == RC_OK && has_tr)
        st = read_ds(r, "/rollouts/logprob_trainer", DS_FLOAT, H5T_NATIVE_FLOAT, 4, 2, S, G,
                     (void **)&out->logprob_trainer);
    if (st == RC_OK && has_rc)
        st = read_ds(r, "/rollouts/logprob_ratiocheck", DS_FLOAT, H5T_NATIVE_FLOAT, 4, 2, S, G,
                     (void **)&out->logprob_ratiocheck);
    if (st == RC_OK && ref)
        st = read_ds(r, "/reference/logprob", DS_FLOAT, H5T_NATIVE_DOUBLE, 8, 2, S, G, (void **)&out->logprob_ref);
    if (st == RC_OK)
        st = read_strs(r, "/prompts/text", P, &out->prompt_text);
    if (st == RC_OK)
        st = read_strs(r, "/rollouts/completion", S, &out->completion);
    if (st == RC_OK && (st = rc_calloc((void **)&out->lens, nlens, sizeof *out->lens, "results")) == RC_OK) {
        out->n_lens = (int)nlens;
        for (int i = 0; st == RC_OK && i < out->n_lens; i++) {
            out->lens[i].len = lens[i];
            char name[64];
            snprintf(name, sizeof name, "/len_%04lld/logprob_forward", (long long)lens[i]);
            st = read_ds(r, name, DS_FLOAT, H5T_NATIVE_FLOAT, 4, 2, S, lens[i], (void **)&out->lens[i].logprob_fwd);
            if (st == RC_OK && dist)
                st = read_dist(r, &out->lens[i], S);
        }
    }
    free(lens);
    if (st == RC_OK && has_rc) /* the three columns' summary, recomputed from them */
        st = read_threeway(r, out);
    if (st == RC_OK)
        st = read_sweep(r, out);
    if (st == RC_OK)
        st = read_routing(r, out);
    return st;
}

rc_status rc_h5_read(const char *path, rc_results *out)
{
    memset(out, 0, sizeof *out);
    /* HDF5 prints its error stack to stderr unless told not to (per thread
     * in a thread-safe build, so on every call) */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return rc_errorf(RC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) /* a FIFO, a device, a folder: never handed to HDF5 */
        return rc_errorf(RC_ERR_IO, "%s: not a regular file", path);
    h5r r = {.path = path, .f = -1};
    if (H5Fis_hdf5(path) <= 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: not an HDF5 file", path);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0) {
        if (fapl >= 0)
            H5Pclose(fapl);
        return rc_errorf(RC_ERR_IO, "%s: cannot initialise the HDF5 library", path);
    }
    r.f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (r.f < 0)
        return rc_errorf(RC_ERR_IO, "%s: cannot open as HDF5", path);
    hsize_t fsz = 0;
    rc_status st = H5Fget_filesize(r.f, &fsz) < 0 ? rc_errorf(RC_ERR_IO, "%s: cannot get the file size", path)
                                                  : RC_OK;
    r.file_size = (uint64_t)fsz;
    if (st == RC_OK)
        st = read_all(&r, out);
    H5Fclose(r.f); /* H5F_CLOSE_STRONG: also whatever an error path left open */
    if (st == RC_OK && out->routing && out->n_lens > 0) { /* the routing record's statistics, at the longest length */
        const rc_len_result *L = &out->lens[out->n_lens - 1];
        rc_routing_compute(out->routing, out->logprob_gen, L->logprob_fwd, L->len);
    }
    if (st == RC_OK) /* with the routing record's, per length, and its verdict line */
        st = rc_compute_stats(out);
    for (int i = 0; st == RC_OK && i < out->n_sweep; i++)
        if (out->sweep[i].res)
            st = rc_compute_stats(out->sweep[i].res);
    if (st == RC_OK && out->n_sweep > 0) /* the best rows and each row's equality, as the sweep found them */
        rc_sweep_summarise(out);
    if (st != RC_OK) {
        /* every message names the file (rc_calloc's and the statistics' do not) */
        if (!strstr(rc_last_error(), path))
            st = rc_error_prefix(st, "%s", path);
        rc_results_free(out);
    }
    return st;
}

/* ------------------------------------------------------------------------ */
/* --rollouts-from                                                          */

rc_status rc_results_check_replay(const rc_results *r, const char *path, int64_t vocab, int64_t max_pos)
{
    if (!r || !path)
        return rc_errorf(RC_ERR_INTERNAL, "rc_results_check_replay: %s is NULL", r ? "path" : "results");
    const int64_t P = r->n_prompts, S = r->n_seq, G = r->gen_len, Pmax = r->prompt_max;
    int64_t ps, n_pt, n_gen;
    if (P < 1 || r->samples < 1 || !rc_mul_i64(P, r->samples, &ps) || ps != S)
        return rc_errorf(RC_ERR_FORMAT, "%s: cannot replay: %lld sequences are not %lld prompts x %lld samples", path,
                         (long long)S, (long long)P, (long long)r->samples);
    if (Pmax < 1 || G < 0 || !rc_mul_i64(P, Pmax, &n_pt) || !rc_mul_i64(S, G, &n_gen))
        return rc_errorf(RC_ERR_FORMAT, "%s: cannot replay: prompts of %lld tokens, %lld generated tokens", path,
                         (long long)Pmax, (long long)G);
    if (!r->prompt_tokens || !r->prompt_len || !r->seq_prompt || !r->seq_sample || !r->gen_valid ||
        (n_gen > 0 && !r->gen_tokens))
        return rc_errorf(RC_ERR_INTERNAL, "%s: rc_results_check_replay: results without their arrays", path);
    for (int64_t p = 0; p < P; p++) {
        const int64_t len = r->prompt_len[p];
        if (len < 1 || len > Pmax)
            return rc_errorf(RC_ERR_FORMAT, "%s: cannot replay: prompt %lld has %lld tokens, outside 1..%lld", path,
                             (long long)p + 1, (long long)len, (long long)Pmax);
        if (len >= max_pos)
            return rc_errorf(RC_ERR_FORMAT,
                             "%s: cannot replay: prompt %lld has %lld tokens, which leaves no room to generate in the "
                             "model's %lld positions",
                             path, (long long)p + 1, (long long)len, (long long)max_pos);
        for (int64_t t = 0; t < len; t++) {
            const int32_t id = r->prompt_tokens[p * Pmax + t];
            if (id < 0 || id >= vocab)
                return rc_errorf(RC_ERR_FORMAT,
                                 "%s: cannot replay: prompt %lld, token %lld has id %d, outside the model's "
                                 "vocabulary [0, %lld)",
                                 path, (long long)p + 1, (long long)t + 1, (int)id, (long long)vocab);
        }
    }
    for (int64_t s = 0; s < S; s++) {
        if (r->seq_prompt[s] != s / r->samples || r->seq_sample[s] != s % r->samples)
            return rc_errorf(RC_ERR_FORMAT,
                             "%s: cannot replay: sequence %lld is sample %d of prompt %d, not sample %lld of prompt "
                             "%lld (prompts x samples order)",
                             path, (long long)s, (int)r->seq_sample[s], (int)r->seq_prompt[s],
                             (long long)(s % r->samples), (long long)(s / r->samples));
        const int64_t valid = r->gen_valid[s];
        if (valid < 0 || valid > G)
            return rc_errorf(RC_ERR_FORMAT, "%s: cannot replay: sequence %lld has %lld valid tokens, outside 0..%lld",
                             path, (long long)s, (long long)valid, (long long)G);
        for (int64_t t = 0; t < valid; t++) {
            const int32_t id = r->gen_tokens[s * G + t];
            if (id < 0 || id >= vocab)
                return rc_errorf(RC_ERR_FORMAT,
                                 "%s: cannot replay: sequence %lld, generated token %lld has id %d, outside the "
                                 "model's vocabulary [0, %lld)%s",
                                 path, (long long)s, (long long)t, (int)id, (long long)vocab,
                                 id >= vocab ? " (written with a model of a larger vocabulary?)" : "");
        }
    }
    return RC_OK;
}
