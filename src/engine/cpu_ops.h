/* Pieces of the CPU attention kernel, exported so that tests can check each
 * dtype rule against PyTorch (and CUDA kernels against their CPU twin). */
#ifndef RC_CPU_OPS_H
#define RC_CPU_OPS_H

#include <stdint.h>

#include "dtype.h"
#include "ops_inline.h"

/* One attention score: q.k over d with `lanes` (8 or 16) partial sums, times
 * scale; with an MD score_dt, R(R(q.k) * scale) (matmul, then * scaling). */
float rc_cpu_score(const float *q, const float *k, int64_t d, int lanes, float scale, rc_dtype score_dt);
/* The same score under a full spec (scaling by division, ALiBi bias of key j;
 * rco_score_spec). */
float rc_cpu_score_spec(const float *q, const float *k, int64_t d, int lanes, const rco_score_spec *sp, int64_t j);
/* In place: scores -> R(softmax) computed in fp32. mode 0: one pass;
 * 1: online over key tiles of 64; 2: chunks of 32 merged. */
void rc_cpu_softmax(float *s, int64_t n, int mode, rc_dtype prob_dt);
/* out[d] = R(sum_j p[j] * V[j, :]) with fp32 accumulation; tile <= 0: in key
 * order, else per tile of keys then added in order. acc: d floats scratch. */
void rc_cpu_pv(const float *p, const float *V, int64_t nk, int64_t d, int64_t tile, rc_dtype out_dt,
               float *acc, float *out);

/* RoPE on one head's rotary slice v[0..2*half) with cos / sin c[half], s[half]:
 * v = R(R(v * c) + R(rotate_half(v) * s)). */
void rc_cpu_rope_apply(float *v, const float *c, const float *s, int64_t half, rc_dtype out_dt);

/* out[i] = rco_exp64((double)x[i]) for n values (8 at a time with AVX-512:
 * the same bits); the sampler's exps. */
void rc_exp64_floats(const float *x, int64_t n, double *out);

/* One vdpbf16ps on raw registers (acc[j] += the pair (2j, 2j+1) of a and b,
 * rco_dpbf16_pair's arithmetic): 1, or 0 without the instruction. */
int rc_cpu_dpbf16_raw(const uint16_t a[32], const uint16_t b[32], float acc[16]);
/* The path engine bf16 GEMMs take for the pair order (rco_gemm_dot_pairs):
 * "vdpbf16ps", "AVX-512 FMA emulation" or "plain C" (decided once, each SIMD
 * path checked against the twin first; RC_NO_AVX512BF16=1 skips the
 * instruction). */
const char *rc_cpu_gemm_pairs_path(void);
/* The kernel a pair-order GEMM of M rows runs on that path (the same bits on
 * each): "vdpbf16ps", "FMA emulation on bf16 operands", "FMA emulation on
 * widened operands" or "plain C". */
const char *rc_cpu_gemm_pairs_kernel(int64_t M);
/* the same for a GEMM of M rows and depth K (rc_cpu_gemm_pairs_kernel: K = 768) */
const char *rc_cpu_gemm_pairs_kernel_mk(int64_t M, int64_t K);
/* The start-up timing behind that choice: the time of one vdpbf16ps and of
 * two vfmadd231ps (the same 32 multiply-adds), in 12 and 24 independent
 * chains, the fastest of 7 tries, in ns: 1, or 0 (zeros) without the
 * instruction. */
int rc_cpu_dpbf16_rate(double *dp_ns, double *fma_ns);

#endif
