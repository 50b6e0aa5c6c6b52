/* test_cuda.h: what test_cuda.c (the tolerances, the helpers, the op twins and the suite) and its
 * section files test_cuda_model.c, test_cuda_errors.c share. */
#ifndef RC_TEST_CUDA_H
#define RC_TEST_CUDA_H

#include <check.h>

#include "backend.h"
#include "model.h"
#include "forward.h"

#ifdef RC_TEST_EMULATE
#define TEST_NAME "cuda_host"
#else
#define TEST_NAME "cuda"
#endif

rc_status test_backend_create(rc_kernels k, rc_backend **out);
float frand(float scale);
extern const rc_dtype k_dts[3];
const char *dt_name(rc_dtype dt);

void model_tests_in_op_twins(TCase *tc);
void model_tests_in_model(TCase *tc);
void errors_tests_in_host(TCase *tc);
void multi_tests(TCase *tc); /* test_cuda_multi.c: one model over several devices */
/* test_cuda_model.c: a Llama of `layers` layers (1 to 3) whose GEMM sizes are multiples of 128, written into dir */
void write_block_model_n(const char *dir, int layers);
/* test_cuda_multi.c: the full forward and a cached prefill + 3 decode steps of a fixed batch (3 sequences of
 * 7, 5, 9 tokens; 12 positions) on e, into fresh buffers */
void cuda_test_forward_decode(rc_engine *e, int64_t V, float **full_out, float **dec_out);
void act_tests(TCase *tc);   /* test_cuda_act.c: the MLP's activations at the dtype's width */
#ifdef RC_TEST_EMULATE
void errors_tests_in_model(TCase *tc);
#endif

#endif
