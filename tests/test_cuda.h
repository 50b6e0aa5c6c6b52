/* What the files of the CUDA suite share (tests/test_cuda.c: see there; test_cuda_common.c the
 * tolerance table and the helpers, test_cuda_ops.c the op twins, test_cuda_model.c whole models;
 * tests/meson.build builds them into test_cuda and test_cuda_host). */
#ifndef RC_TEST_CUDA_H
#define RC_TEST_CUDA_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "forward.h"
#include "fp8w.h"
#include "model.h"
#include "prompts.h"
#include "rc_cuda.h"
#include "rck_threads.h"
#ifdef RC_TEST_EMULATE
#include "shim_control.h"
#endif
#include "results.h"
#include "rollout.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"

#ifdef RC_TEST_EMULATE
#define TEST_NAME "cuda_host"
#else
#define TEST_NAME "cuda"
#endif


/* test_cuda_common.c */
typedef struct {
    rc_backend *t, *c; /* under test, CPU twin */
} pair;
double tol_for(const char *op, rc_dtype out_dt, bool *unmeasured);
double ulp_dt(double x, rc_dtype dt);
rc_status test_backend_create(rc_kernels k, rc_backend **out);
float frand(float scale);
float *rand_vec(int64_t n, float scale, rc_dtype dt);
pair make_pair(rc_kernels k);
void free_pair(pair *p);
float *dev_copy(rc_backend *be, const float *host, int64_t n);
float *host_copy(rc_backend *be, const float *dev, int64_t n);
void begin_checks(void);
void end_checks(void);
void compare(const char *op, const char *what, const float *got, const float *ref, int64_t n, rc_dtype out_dt);
extern const rc_dtype k_dts[3];
const char *dt_name(rc_dtype dt);

/* the test cases' tests, added in the order they run */
void cuda_add_op_tests(TCase *ops);      /* test_cuda_ops.c */
void cuda_add_model_tests(TCase *model); /* test_cuda_model.c */

#endif
