/* What the files of the HDF5 results suite share: test_h5out.c (the writer: see there),
 * test_h5out_read.c (the reader and replays), test_h5out_util.c (temporary folders, building
 * results, reading them back). The suite, as a whole:
 *
 * Check suite for the HDF5 results writer (src/results/h5out.c).
 *
 * Every test builds an rc_results by hand (values from simple formulas, with
 * NaN / -1 padding, a NaN in the forward log-probs and distinct statistics),
 * writes it into a fresh temporary folder and reads everything back with the
 * HDF5 C API: types, shapes, chunking, filters, fill values, creation order,
 * and values compared bit for bit. The failure tests check that nothing is
 * left behind: no output and no temporary file.
 */
#ifndef RC_TEST_H5OUT_H
#define RC_TEST_H5OUT_H

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
#include "status.h"

#include "testutil.h"

/* Declared in h5out.c; to move to results.h. */

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* test_h5out_util.c */
extern char g_base[256];
extern char g_dir[512];
void setup(void);
void teardown(void);
const char *tpath(const char *name);
const char *dir_listing(const char *dir);
void write_text(const char *path, const char *text);
void check_text(const char *path, const char *want);
void *xcalloc(size_t n, size_t sz);
char *xstrdup(const char *s);
rc_results *build(int64_t np, int64_t pmax, int64_t ns, int64_t gl, const int64_t *lens,
                  int nlens, bool ref);
rc_results *build_default(bool ref);
void destroy(rc_results *r);
void *read_ds(hid_t loc, const char *name, hid_t ftype, hid_t mtype, size_t esz, int rank,
              hsize_t d0, hsize_t d1);
void check_file_ex(const char *path, const rc_results *r, const char *cmd, const char *model);
void check_file(const char *path, const rc_results *r);
unsigned char *slurp(const char *path, size_t *len);

/* test_h5out_read.c: its tests, added in the order they run */
void h5out_add_reader_tests(TCase *rd);
void h5out_add_replay_tests(TCase *rp);

#endif
