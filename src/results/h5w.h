/* The HDF5 results writer's parts that h5out.c (the whole file at once)
 * with h5contents.c (what goes in it) and h5stream.c (ratiocheck score's
 * file in slices of sequences) share:
 * the open file, the error reporting, the attribute and dataset writers, the
 * groups of a run, the temporary file's life. Internal to src/results/. */
#ifndef RC_H5W_H
#define RC_H5W_H

#include <hdf5.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "results.h"
#include "status.h"

typedef struct {
 const char *path; /* the final output path, named in every message */
 hid_t file;
 bool deflate;
} h5w;

#define TMP_PATH_MAX (PATH_MAX + 64) /* a temporary file's path */

extern pthread_mutex_t g_write_lock; /* one writer at a time */

rc_status ds_f32_2d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t rows, int64_t cols, const float *data);
rc_status group_close(const h5w *w, hid_t g, const char *name, rc_status st);
rc_status h5_fail(const h5w *w, const char *verb, const char *what);
rc_status group_create(const h5w *w, const char *name, hid_t *out);
rc_status ds_i32_1d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t n, const int32_t *data);
void temp_discard(h5w *w);
void ratio_rows(const float *fwd, const float *gen, int64_t n, int64_t L, int64_t G, bool log_ratio, float *out);
rc_status ds_i32_2d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t rows, int64_t cols, const int32_t *data);
rc_status ds_f64_1d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t n, const double *data);
rc_status write_verdict(const h5w *w, const rc_results *r);
rc_status write_threeway(const h5w *w, const rc_results *r);
rc_status write_strata(const h5w *w, const char *len_obj, const rc_len_stats *s);
rc_status write_root_attrs(const h5w *w, const rc_results *r);
rc_status write_pos_arrays(const h5w *w, hid_t g, const char *o, const rc_len_result *lr);
rc_status write_len_attrs(const h5w *w, hid_t g, const char *o, const rc_len_result *lr);
rc_status write_growth(const h5w *w, const rc_results *r);
rc_status write_cross(const h5w *w, const rc_results *r);
hid_t utf8_vlen_type(void);
void utf8_rows_free(const char **v, char **fixed, int64_t n);
rc_status utf8_rows(const h5w *w, const char *what, char *const *strs, int64_t n, const char ***v_out, char ***fixed_out);
rc_status temp_open(h5w *w, const char *path, bool force, char *dir, size_t dn);
rc_status temp_commit(h5w *w, const char *path, const char *dir);
rc_status ds_str_1d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t n, char *const *strs);
rc_status ds_f64_2d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t rows, int64_t cols, const double *data);

rc_status attr_str(const h5w *w, hid_t loc, const char *obj, const char *name, const char *value);
rc_status attr_i64(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t v);
rc_status attr_f64(const h5w *w, hid_t loc, const char *obj, const char *name, double v);
rc_status ds_write(const h5w *w, hid_t loc, const char *obj, const char *name, hid_t ftype, hid_t mtype, int rank,
                   const hsize_t *dims, const void *data, const void *fill);
rc_status attr_num(const h5w *w, hid_t loc, const char *obj, const char *name, hid_t ftype, hid_t mtype, int64_t n,
                   const void *data);
rc_status ds_i64_1d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t n, const int64_t *data);
/* h5contents.c: the whole of a run (h5out.c's layout) into the open file */
rc_status write_all(const h5w *w, const rc_results *r);
/* h5routing.c: /routing (a MoE run's routing record, routing.h), nothing without one */
rc_status write_routing(const h5w *w, const rc_results *r);

/* h5path.c: the folder of path; the temporary file of process pid beside path; path checked as a target */
rc_status split_dir(const char *path, char *dir, size_t n);
rc_status temp_name(const char *path, long pid, char *buf, size_t n);
rc_status check_target(const char *path, bool force, char *dir, size_t n);

#endif
