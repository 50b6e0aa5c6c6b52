/* test_h5out.h: what test_h5out.c (the fixtures and the suite) and its section files
 * test_h5out_write.c, test_h5out_read.c, test_h5out_routing.c share. */
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
#include "routing.h"
#include "status.h"

#include "testutil.h"

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define RC_CLI RC_TEST_BUILD_DIR "/src/ratiocheck"

void write_tests_in_write(TCase *tc);
void write_tests_in_failures(TCase *tc);
void read_tests_in_reader(TCase *tc);
void routing_tests_in_reader(TCase *tc);
void read_tests_in_replay(TCase *tc);
void routing_tests_in_replay(TCase *tc);
extern char g_base[256];
extern char g_dir[512];
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
void assert_one_line(const char *path);
void copy_file(const char *from, const char *to);
hid_t h5_open_rw(const char *path);
void put_ds(hid_t f, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims, const void *data,
            bool chunked);
void put_attr_i64(hid_t f, const char *name, int64_t v);
void patch_i32(const char *path, const char *name, int64_t index, int32_t v);
int report(const char *file);
void expect_read_error(const char *path, rc_status want, const char *mention);

#endif
