/* CPU backend: the reference implementation of every op, and the CPU twin of
 * every CUDA kernel.
 *
 * Each op computes in fp32 and rounds its output to the dtype it is given
 * (see backend.h). Reductions are ordered by the kernel strategy:
 *
 *   reduction            INVARIANT            ENGINE (and BLAS, except GEMM)
 *   GEMM dot (len K)     16 lanes with FMA,       16 lanes with FMA in K chunks
 *                        one chunk, any M     (rco_gemm_dot): M <= 16 split-K
 *                                             in 4 slices, M <= 256 in 2,
 *                                             M > 256 K tiles of 128; each
 *                                             chunk's lanes added lane-wise;
 *                                             bf16 operands: each chunk in
 *                                             pairs, vdpbf16ps's arithmetic
 *                                             (rco_gemm_dot_pairs)
 *                                             (BLAS: OpenBLAS sgemm)
 *   attention q.k (d)    16 lanes             decode 16 lanes, prefill 8 lanes
 *   softmax max/sum      one pass in order    prefill: key tiles of 64, online
 *                                             (running max, rescaled sum);
 *                                             decode: chunks of 32 merged
 *   P.V sum over keys    in order             prefill: split-K over the call's
 *                                             padded key length T (4 slices,
 *                                             like a [T,T]x[T,d] batched GEMM),
 *                                             so it depends on the longest
 *                                             sequence in the batch;
 *                                             decode: per chunk of 32, summed
 *   LayerNorm mean/var   16 lanes             16 lanes (per-row, like torch)
 *   RMSNorm mean(x^2)    16 lanes             M < 16: 64 lanes, else 32
 *
 * "L lanes" means: lane j sums elements j, j+L, j+2L, ... in order, then the
 * lanes are added in a fixed pairwise tree. The build disables FMA
 * contraction, so every product and sum is rounded as written; the GEMM dots
 * use fused multiply-adds explicitly (fmaf / vfmadd, the same rounding). */
#include "rc_build_config.h"

#if RC_HAVE_BLAS
#include <cblas.h>
#endif
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cpu_ops.h"
#include "moe.h"
#include "ops_inline.h"
#include "util.h"


const char *rc_kernels_name(rc_kernels k)
{
    switch (k) {
    case RC_KERNELS_ENGINE: return "engine";
    case RC_KERNELS_INVARIANT: return "invariant";
    case RC_KERNELS_BLAS: return "blas";
    }
    return "?";
}

const char *const rc_blas_missing_msg = "this build has no OpenBLAS (-Dblas=disabled)";

static void cpu_destroy(rc_backend *be);

static rc_status cpu_alloc(rc_backend *be, int64_t n, float **out)
{
    (void)be;
    return rc_alloc_aligned((void **)out, n, sizeof(float), "activation buffer");
}

static void cpu_free(rc_backend *be, float *p)
{
    (void)be;
    free(p);
}

static rc_status cpu_upload(rc_backend *be, const float *host, int64_t n, rc_dtype dt, float *dst)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        dst[i] = rc_round_to(host[i], dt);
    return RC_OK;
}

/* ---- ops ----------------------------------------------------------------- */

static rc_status cpu_embed(rc_backend *be, const int32_t *tokens, int64_t n, rc_wt table, int64_t hidden,
                           float *out)
{
    (void)be;
    for (int64_t r = 0; r < n; r++)
        rc_wt_convert(table, (int64_t)tokens[r] * hidden, hidden, RC_F32, RC_F32, out + r * hidden);
    return RC_OK;
}

static rc_status cpu_norm(rc_backend *be, rc_norm_kind kind, const float *x, int64_t M, int64_t H,
                          const float *w, const float *b, double eps, rc_dtype mid_dt,
                          rc_dtype out_dt, float *out)
{
    const int rms_lanes = rco_rms_lanes(be->kernels == RC_KERNELS_INVARIANT, M);
    const float feps = (float)eps;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < M; r++)
        rco_norm_row(kind, x + r * H, H, w, b, feps, rms_lanes, mid_dt, out_dt, out + r * H);
    return RC_OK;
}

static rc_status cpu_qk_norm(rc_backend *be, float *qkv, int64_t M, int64_t stride, int64_t nq, int64_t dq,
                             const float *wq, int64_t nk, int64_t dk, const float *wk, double eps, rc_dtype mid_dt,
                             rc_dtype out_dt)
{
    const int rms_lanes = rco_rms_lanes(be->kernels == RC_KERNELS_INVARIANT, M);
    const float feps = (float)eps;
    const int64_t segs = nq + nk;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M * segs; i++)
        rco_qk_norm_seg(qkv + (i / segs) * stride, i % segs, nq, dq, wq, dk, wk, feps, rms_lanes, mid_dt, out_dt);
    return RC_OK;
}

/* the CPU backend's state: one scratch buffer, grown when a call needs more
 * (attention's per-thread scores, statistics and widened keys / values), so
 * that a decode step allocates nothing */
#define RC_ACT_KINDS 5 /* rc_act's values */
_Static_assert(RC_ACT_GELU_NEW == RC_ACT_KINDS - 1, "RC_ACT_KINDS counts rc_act");
typedef struct {
    rc_backend base;
    float *scratch;
    int64_t scratch_n;
    float *act_lut[RC_ACT_KINDS]; /* [65536]: rco_act_dt(act, x, RC_BF16) of every bf16 x, by its bits (act_table) */
} cpu_backend;

static rc_status cpu_scratch(rc_backend *be, int64_t n, float **out)
{
    cpu_backend *c = (cpu_backend *)be;
    if (n > c->scratch_n) { /* grown by at least half (decode asks a little more each step), never zeroed */
        int64_t want = c->scratch_n + c->scratch_n / 2 > n ? c->scratch_n + c->scratch_n / 2 : n;
        size_t bytes;
        if (want > RC_MAX_ALLOC / (int64_t)sizeof(float))
            want = n;
        if (n > RC_MAX_ALLOC / (int64_t)sizeof(float))
            return rc_errorf(RC_ERR_NOMEM, "CPU scratch: %lld floats is too large", (long long)n);
        bytes = ((size_t)want * sizeof(float) + 63) & ~(size_t)63;
        float *p = aligned_alloc(64, bytes);
        if (!p)
            return rc_errorf(RC_ERR_NOMEM, "CPU scratch: cannot allocate %zu bytes", bytes);
        free(c->scratch);
        c->scratch = p;
        c->scratch_n = want;
    }
    *out = c->scratch;
    return RC_OK;
}

/* ---- GEMM ------------------------------------------------------------------ */

/* Blocks of GEMM_M_BLOCK rows x GEMM_N_BLOCK columns are the unit of work of
 * the threads; inside a block the AVX-512 micro-kernel computes UK_MR rows x
 * UK_NR columns at once, one 16-float register of lanes per output. Blocking
 * decides only which outputs are computed when: every output's K order is
 * rco_gemm_dot's, whatever the block, the thread or the instruction set. */
#ifndef GEMM_M_BLOCK
#define GEMM_M_BLOCK 192 /* a multiple of UK_MR */
#endif
#ifndef GEMM_N_BLOCK
#define GEMM_N_BLOCK 64
#endif
/* K blocks of the AVX-512 kernel's sums merge (invariant and split-K orders)
 * when K > 2 * GEMM_K_BLOCK (a multiple of 16), GEMM_KN_GROUP columns (a
 * multiple of UK_NR) at a time */
#ifndef GEMM_K_BLOCK
#define GEMM_K_BLOCK 1024
#endif
#ifndef GEMM_KN_GROUP
#define GEMM_KN_GROUP 32
#endif
#define UK_MR 6 /* gemm_block_avx512's switches have a case for every mr <= 6, nr <= 4 */
#define UK_NR 4
#define UK_MR_L 4 /* lanes merge: 2 x 12 accumulators + 3 weights + 1 input in 32 registers */
#define UK_NR_L 3

/* The portable kernel: rco_gemm_dot per output (CPUs without AVX-512); a
 * bf16 / fp16 weight row is widened to fp32 first (wrow: K floats). Row m of
 * x starts at x + m * ldx, row n of W at element n * ldw (both K for a whole
 * GEMM; larger for a K-slice). */
static void gemm_block_ref(const float *x, int64_t ldx, int64_t K, rc_wt W, int64_t ldw, const float *bias,
                           rc_dtype out_dt, float *y, int64_t N, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                           rco_gemm_order o, float *wrow)
{
    for (int64_t n = n0; n < n1; n++) {
        const float *w = (const float *)W.p + n * ldw;
        if (W.dt != RC_F32) {
            rc_wt_convert(W, n * ldw, K, RC_F32, RC_F32, wrow);
            w = wrow;
        }
        for (int64_t m = m0; m < m1; m++) {
            float v = rco_gemm_dot(x + m * ldx, w, K, 1, o);
            y[m * N + n] = rc_round_to(bias ? v + bias[n] : v, out_dt);
        }
    }
}

/* RC_GEMM_PORTABLE_ONLY (the fuzz build): the plain-C kernel only */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(RC_GEMM_PORTABLE_ONLY)
#include <immintrin.h>
#define RC_GEMM_AVX512 1
#define AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

/* 16 weights from element i of W (fp32, or bf16 / fp16 widened exactly);
 * masked: the lanes outside mk read nothing and are 0 */
AVX512_FN static inline __attribute__((always_inline)) __m512 uk_loadw(const int wdt, const void *W, int64_t i)
{
    if (wdt == RC_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)W + i))), 16));
    if (wdt == RC_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)W + i)));
    return _mm512_loadu_ps((const float *)W + i);
}
AVX512_FN static inline __attribute__((always_inline)) __m512 uk_loadw_mask(const int wdt, const void *W, int64_t i,
                                                                          __mmask16 mk)
{
    if (wdt == RC_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)W + i)), 16));
    if (wdt == RC_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)W + i));
    return _mm512_maskz_loadu_ps(mk, (const float *)W + i);
}

/* rco_tree8 on one register: lanes j + 4, j + 2, j + 1 */
AVX512_FN static inline float tree8_256(__m256 v)
{
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

/* rco_tree16 on one register: lanes j + 8, then rco_tree8 */
AVX512_FN static inline float tree16_512(__m512 v)
{
    return tree8_256(_mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

/* tree16_512 of 16 registers at once: the same additions, each with the same
 * two operands in the same order (lanes j and j + 8, then j + 4, j + 2, j + 1;
 * the lower lane first), the registers transposed between them by shuffles,
 * 15 adds and 30 shuffles instead of 16 trees; r[i] = tree16_512(v[i]) */
AVX512_FN static inline __attribute__((always_inline)) void tree16_x16(const __m512 v[16], float r[16])
{
    __m512 t[8], u[4], w[2];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) /* lane j + 8: output 2p in the low half, 2p + 1 in the high half */
        t[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) /* lane j + 4: output 4q + c in 128-bit lane c */
        u[q] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], 0xDD));
#pragma GCC unroll 2
    for (int q = 0; q < 2; q++) /* lane j + 2: elements 0, 1 of lane c output 8q + c; 2, 3 output 8q + 4 + c */
        w[q] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * q], u[2 * q + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[2 * q], u[2 * q + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane j + 1: element e of 128-bit lane c is output 4e + c */
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
    float o[16] __attribute__((aligned(64)));
    _mm512_store_ps(o, z);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        r[i] = o[(i & 3) * 4 + (i >> 2)];
}

/* r[i * nr + j] = tree16_512(a[i][j]) for an mr x nr tile (constants after
 * inlining): 16 at a time by tree16_x16, the rest one by one */
AVX512_FN static inline __attribute__((always_inline)) void trees_tile(const int mr, const int nr,
                                                                       __m512 a[UK_MR][UK_NR], float *r)
{
    const int n = mr * nr;
    int i0 = 0;
    if (n >= 8) {
        for (; i0 < n; i0 += 16) {
            __m512 v[16];
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++)
                v[t] = i0 + t < n ? a[(i0 + t) / nr][(i0 + t) % nr] : _mm512_setzero_ps();
            float o[16];
            tree16_x16(v, o);
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++)
                if (i0 + t < n)
                    r[i0 + t] = o[t];
        }
        return;
    }
#pragma GCC unroll 8
    for (int t = 0; t < n; t++)
        r[t] = tree16_512(a[t / nr][t % nr]);
}

/* acc += the 16 lanes of K [k, k1) for mr x nr outputs (mr <= UK_MR, nr <=
 * UK_NR, constants after inlining), k on the chunk's 16 grid; uk_chunk: acc =
 * the lanes of one K chunk [k, k1) */
AVX512_FN static inline __attribute__((always_inline)) void
uk_chunk_on(const int mr, const int nr, const int wdt, const float *x, int64_t ldx, const void *W, int64_t ldw,
            int64_t k, int64_t k1, __m512 acc[UK_MR][UK_NR])
{
    for (; k + 16 <= k1; k += 16) {
        __m512 w[UK_NR];
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            w[j] = uk_loadw(wdt, W, j * ldw + k);
            __asm__("" : "+v"(w[j])); /* keep it in a register: loaded once, used mr times */
        }
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            __m512 a = _mm512_loadu_ps(x + i * ldx + k);
            __asm__("" : "+v"(a));
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                acc[i][j] = _mm512_fmadd_ps(a, w[j], acc[i][j]);
        }
    }
    if (k < k1) { /* the lanes past the end keep their sums, as in rco_gemm_dot */
        const __mmask16 mk = (__mmask16)((1u << (k1 - k)) - 1u);
        __m512 w[UK_NR];
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            w[j] = uk_loadw_mask(wdt, W, j * ldw + k, mk);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            const __m512 a = _mm512_maskz_loadu_ps(mk, x + i * ldx + k);
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                acc[i][j] = _mm512_mask3_fmadd_ps(a, w[j], acc[i][j], mk);
        }
    }
}

AVX512_FN static inline __attribute__((always_inline)) void
uk_chunk(const int mr, const int nr, const int wdt, const float *x, int64_t ldx, const void *W, int64_t ldw, int64_t k,
         int64_t k1, __m512 acc[UK_MR][UK_NR])
{
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            acc[i][j] = _mm512_setzero_ps();
    uk_chunk_on(mr, nr, wdt, x, ldx, W, ldw, k, k1, acc);
}

/* out = rco_gemm_dot of mr x nr outputs (depth K; rows of x and W ldx and ldw
 * elements apart). `lanes` (a constant after inlining) is the merge of the
 * chunks: 0, sums merge (split-K: a tree per chunk, the partial sums added in
 * order; one chunk is this case too), 1, lanes merge (each chunk's lanes added
 * to the running lanes, one tree at the end). Lanes merge keeps two registers
 * per output (the running lanes and the chunk's), so its tile is smaller
 * (UK_MR_L x UK_NR_L) and nothing spills. */
AVX512_FN static inline __attribute__((always_inline)) void
ukernel(const int mr, const int nr, const int wdt, const int lanes, const float *x, int64_t ldx, int64_t K,
        const void *W, int64_t ldw, int64_t C, float out[UK_MR][UK_NR])
{
    __m512 tot[UK_MR][UK_NR], acc[UK_MR][UK_NR];
    uk_chunk(mr, nr, wdt, x, ldx, W, ldw, 0, C < K ? C : K, tot);
    float r[UK_MR * UK_NR];
    if (!lanes) {
        trees_tile(mr, nr, tot, r);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                out[i][j] = r[i * nr + j];
        for (int64_t k0 = C; k0 < K; k0 += C) {
            uk_chunk(mr, nr, wdt, x, ldx, W, ldw, k0, K - k0 < C ? K : k0 + C, acc);
            trees_tile(mr, nr, acc, r);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
                for (int j = 0; j < nr; j++)
                    out[i][j] += r[i * nr + j];
        }
        return;
    }
    /* lanes merge: the running lanes in memory (L1), so the chunk's tile is
     * the full UK_MR x UK_NR; stores and loads keep every bit */
    float run[UK_MR * UK_NR * 16] __attribute__((aligned(64)));
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            _mm512_store_ps(run + (i * UK_NR + j) * 16, tot[i][j]);
    for (int64_t k0 = C; k0 < K; k0 += C) {
        uk_chunk(mr, nr, wdt, x, ldx, W, ldw, k0, K - k0 < C ? K : k0 + C, acc);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                _mm512_store_ps(run + (i * UK_NR + j) * 16,
                                _mm512_add_ps(_mm512_load_ps(run + (i * UK_NR + j) * 16), acc[i][j]));
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            tot[i][j] = _mm512_load_ps(run + (i * UK_NR + j) * 16);
    trees_tile(mr, nr, tot, r);
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            out[i][j] = r[i * nr + j];
}

/* ukernel's sums merge (one chunk included) over the K block [ka, kb) only
 * (ka, kb on the 16 grid), the outputs' state between K blocks in st
 * (UK_KB_ST floats: the lanes of the chunk under way as full 16-lane
 * registers, then the partial sums of the chunks done), stored and loaded as
 * they are, so every output's operations are ukernel's, in its order, to the
 * bit: a chunk may span K blocks, its lanes carried, never reduced early.
 * out is written when kb == K. (The lanes merge, K blocks on its chunk grid
 * with the running lanes carried, measured slower than ukernel's: not used.) */
#define UK_KB_ST (UK_MR * UK_NR * 16 + (UK_MR * UK_NR + 15) / 16 * 16) /* 64-byte multiple */
AVX512_FN static inline __attribute__((always_inline)) void
ukernel_kb(const int mr, const int nr, const int wdt, const float *x, int64_t ldx, int64_t K,
           const void *W, int64_t ldw, int64_t C, int64_t ka, int64_t kb, float *st, float out[UK_MR][UK_NR])
{
    __m512 acc[UK_MR][UK_NR];
    float *sums = st + UK_MR * UK_NR * 16;
    for (int64_t k = ka; k < kb;) {
        const int64_t c0 = k / C * C, c1 = K - c0 < C ? K : c0 + C, e = c1 < kb ? c1 : kb;
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                acc[i][j] = k == c0 ? _mm512_setzero_ps() : _mm512_load_ps(st + (i * UK_NR + j) * 16);
        uk_chunk_on(mr, nr, wdt, x, ldx, W, ldw, k, e, acc);
        if (e < c1) { /* the chunk goes on in the next K block */
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
                for (int j = 0; j < nr; j++)
                    _mm512_store_ps(st + (i * UK_NR + j) * 16, acc[i][j]);
            return;
        }
        float r[UK_MR * UK_NR];
        trees_tile(mr, nr, acc, r);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                sums[i * UK_NR + j] = c0 == 0 ? r[i * nr + j] : sums[i * UK_NR + j] + r[i * nr + j];
        k = e;
    }
    if (kb < K)
        return;
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            out[i][j] = sums[i * UK_NR + j];
}

/* gemm_block_avx512 in K blocks (K > 2 * GEMM_K_BLOCK): per row tile, a K
 * block over GEMM_KN_GROUP columns at a time, so the tile's rows of x stay in
 * L1 over the column tiles; each output's state carried by ukernel_kb */
AVX512_FN static inline __attribute__((always_inline)) void
gemm_block_avx512_kb(const int wdt, const float *x, int64_t ldx, int64_t K, const void *W,
                     int64_t ldw, int64_t w_n0, const float *bias, rc_dtype out_dt, float *y, int64_t N, int64_t m0,
                     int64_t m1, int64_t n0, int64_t n1, int64_t C)
{
    const int es = wdt == RC_F32 ? 4 : 2;
    const int MR = UK_MR, NR = UK_NR;
    const int64_t KB = GEMM_K_BLOCK;
    float st[GEMM_KN_GROUP / UK_NR * UK_KB_ST] __attribute__((aligned(64)));
    for (int64_t m = m0; m < m1; m += MR) {
        const int mr = m1 - m < MR ? (int)(m1 - m) : MR;
        const float *xm = x + m * ldx;
        for (int64_t g0 = n0; g0 < n1; g0 += GEMM_KN_GROUP) {
            const int64_t g1 = n1 - g0 < GEMM_KN_GROUP ? n1 : g0 + GEMM_KN_GROUP;
            for (int64_t ka = 0; ka < K; ka += KB) {
                const int64_t kb = K - ka < KB ? K : ka + KB;
                for (int64_t n = g0; n < g1; n += NR) {
                    const int nr = g1 - n < NR ? (int)(g1 - n) : NR;
                    const void *Wn = (const char *)W + (size_t)((n - w_n0) * ldw) * (size_t)es;
                    float *sn = st + (n - g0) / NR * UK_KB_ST;
                    float out[UK_MR][UK_NR];
                    switch (mr * 8 + nr) {
#define UK_CASE(MR, NR) \
    case (MR) * 8 + (NR): ukernel_kb(MR, NR, wdt, xm, ldx, K, Wn, ldw, C, ka, kb, sn, out); break;
#define UK_ROW(MR) UK_CASE(MR, 1) UK_CASE(MR, 2) UK_CASE(MR, 3) UK_CASE(MR, 4)
                        UK_ROW(1) UK_ROW(2) UK_ROW(3) UK_ROW(4) UK_ROW(5) UK_ROW(6)
#undef UK_ROW
#undef UK_CASE
                    default: break;
                    }
                    if (kb < K)
                        continue;
                    for (int i = 0; i < mr; i++)
                        for (int j = 0; j < nr; j++) {
                            float v = out[i][j];
                            y[(m + i) * N + n + j] = rc_round_to(bias ? v + bias[n + j] : v, out_dt);
                        }
                }
            }
        }
    }
}

AVX512_FN static inline __attribute__((always_inline)) void
gemm_block_avx512(const int wdt, const int lanes, const float *x, int64_t ldx, int64_t K, const void *W, int64_t ldw,
                  int64_t w_n0, const float *bias, rc_dtype out_dt, float *y, int64_t N, int64_t m0, int64_t m1,
                  int64_t n0, int64_t n1, int64_t C)
{
    const int es = wdt == RC_F32 ? 4 : 2;
    const int MR = UK_MR, NR = UK_NR;
    for (int64_t m = m0; m < m1; m += MR) {
        const int mr = m1 - m < MR ? (int)(m1 - m) : MR;
        for (int64_t n = n0; n < n1; n += NR) {
            const int nr = n1 - n < NR ? (int)(n1 - n) : NR;
            const float *xm = x + m * ldx;
            const void *Wn = (const char *)W + (size_t)((n - w_n0) * ldw) * (size_t)es; /* W's first row is w_n0 */
            float out[UK_MR][UK_NR];
            if (lanes) {
                switch (mr * 8 + nr) { /* every edge shape its own register tile */
#define UK_CASE(MR, NR) \
    case (MR) * 8 + (NR): ukernel(MR, NR, wdt, 1, xm, ldx, K, Wn, ldw, C, out); break;
#define UK_ROW(MR) UK_CASE(MR, 1) UK_CASE(MR, 2) UK_CASE(MR, 3) UK_CASE(MR, 4)
                    UK_ROW(1) UK_ROW(2) UK_ROW(3) UK_ROW(4) UK_ROW(5) UK_ROW(6)
#undef UK_ROW
#undef UK_CASE
                default: break;
                }
            } else {
                switch (mr * 8 + nr) {
#define UK_CASE(MR, NR) \
    case (MR) * 8 + (NR): ukernel(MR, NR, wdt, 0, xm, ldx, K, Wn, ldw, C, out); break;
#define UK_ROW(MR) UK_CASE(MR, 1) UK_CASE(MR, 2) UK_CASE(MR, 3) UK_CASE(MR, 4)
                    UK_ROW(1) UK_ROW(2) UK_ROW(3) UK_ROW(4) UK_ROW(5) UK_ROW(6)
#undef UK_ROW
#undef UK_CASE
                default: break;
                }
            }
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < nr; j++) {
                    float v = out[i][j];
                    y[(m + i) * N + n + j] = rc_round_to(bias ? v + bias[n + j] : v, out_dt);
                }
        }
    }
}

/* rco_dot16 / rco_dot8 on one register of lanes: each lane's products
 * multiplied then added (no fma), lanes past the end untouched, the same tree */
/* 8 values from element i of V (fp32, or bf16 / fp16 widened exactly),
 * masked as uk_loadw_mask */
AVX512_FN static inline __attribute__((always_inline)) __m256 uk_loadw8_mask(const int wdt, const void *W, int64_t i,
                                                                           __mmask8 mk)
{
    if (wdt == RC_BF16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(mk, (const uint16_t *)W + i)), 16));
    if (wdt == RC_F16)
        return _mm512_castps512_ps256(
            _mm512_cvtph_ps(_mm256_zextsi128_si256(_mm_maskz_loadu_epi16(mk, (const uint16_t *)W + i))));
    return _mm256_maskz_loadu_ps(mk, (const float *)W + i);
}

/* element i of V as a float */
static inline __attribute__((always_inline)) float uk_at(const int wdt, const void *W, int64_t i)
{
    if (wdt == RC_BF16)
        return rc_bf16_to_f32(((const uint16_t *)W)[i]);
    if (wdt == RC_F16)
        return rc_f16_to_f32(((const uint16_t *)W)[i]);
    return ((const float *)W)[i];
}

/* the dots of q (fp32) with b's n elements (b stored as bdt: its exact fp32
 * values), 16 or 8 lanes */
AVX512_FN static inline __attribute__((always_inline)) float dot16_avx512(const int bdt, const float *a, const void *b,
                                                                        int64_t n)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(a + k), uk_loadw(bdt, b, k)));
    if (k < n) {
        const __mmask16 mk = (__mmask16)((1u << (n - k)) - 1u);
        acc = _mm512_mask_add_ps(acc, mk, acc, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, a + k), uk_loadw_mask(bdt, b, k, mk)));
    }
    return tree16_512(acc);
}

AVX512_FN static inline __attribute__((always_inline)) float dot8_avx512(const int bdt, const float *a, const void *b,
                                                                       int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + k), uk_loadw8_mask(bdt, b, k, (__mmask8)0xff)));
    if (k < n) {
        const __mmask8 mk = (__mmask8)((1u << (n - k)) - 1u);
        acc = _mm256_mask_add_ps(acc, mk, acc, _mm256_mul_ps(_mm256_maskz_loadu_ps(mk, a + k), uk_loadw8_mask(bdt, b, k, mk)));
    }
    return tree8_256(acc);
}

/* dst[0..d) += p * v[0..d), multiplied then added, 16 columns at a time */
AVX512_FN static inline __attribute__((always_inline)) void axpy_avx512(const int vdt, float *dst, float p, const void *v,
                                                                      int64_t d)
{
    const __m512 pp = _mm512_set1_ps(p);
    int64_t t = 0;
    for (; t + 16 <= d; t += 16)
        _mm512_storeu_ps(dst + t, _mm512_add_ps(_mm512_loadu_ps(dst + t), _mm512_mul_ps(pp, uk_loadw(vdt, v, t))));
    for (; t < d; t++)
        dst[t] += p * uk_at(vdt, v, t);
}

/* rco_attn_row with its dots and P.V 16 columns at a time: the same
 * operations in the same order (rco_pv's loops over t are independent), so
 * the same bits; the softmax is rco_attn_softmax's. Keys and values stored as
 * kdt (fp32, or a 2-byte cache read in place: each value widened exactly in
 * registers, the same values as a widened copy). */
AVX512_FN static inline __attribute__((always_inline)) void
attn_row_avx512_body(const int kdt, const float *q, const void *Kh, const void *Vh, int64_t nk, int64_t d,
                     const rco_score_spec *sp, int mode, int64_t max_keys, rc_dtype prob_dt, rc_dtype out_dt, float *sc,
                     float *ms, float *ls, float *acc, float *part, float *out)
{
    const int64_t es = kdt == RC_F32 ? 4 : 2; /* bytes per stored value */
    const char *K = (const char *)Kh, *V = (const char *)Vh;
    for (int64_t j = 0; j < nk; j++)
        sc[j] = rco_score_dot(mode == 1 ? dot8_avx512(kdt, q, K + j * d * es, d) : dot16_avx512(kdt, q, K + j * d * es, d),
                              sp, j);
    rco_attn_softmax(sc, nk, mode, sp, prob_dt, ms, ls);
    const int64_t tile = rco_pv_tile(mode, max_keys);
    for (int64_t t = 0; t < d; t++)
        acc[t] = 0.0f;
    if (tile <= 0) {
        for (int64_t j = 0; j < nk; j++)
            axpy_avx512(kdt, acc, sc[j], V + j * d * es, d);
    } else {
        for (int64_t t0 = 0; t0 < nk; t0 += tile) {
            const int64_t t1 = t0 + tile < nk ? t0 + tile : nk;
            for (int64_t t = 0; t < d; t++)
                part[t] = 0.0f;
            for (int64_t j = t0; j < t1; j++)
                axpy_avx512(kdt, part, sc[j], V + j * d * es, d);
            for (int64_t t = 0; t < d; t++)
                acc[t] += part[t];
        }
    }
    for (int64_t t = 0; t < d; t++)
        out[t] = rc_round_to(acc[t], out_dt);
}

#define ATTN_ROW_INSTANCE(NAME, KDT)                                                                                \
    AVX512_FN static void NAME(const float *q, const void *Kh, const void *Vh, int64_t nk, int64_t d,              \
                               const rco_score_spec *sp, int mode, int64_t max_keys, rc_dtype prob_dt,              \
                               rc_dtype out_dt, float *sc, float *ms, float *ls, float *acc, float *part, float *out) \
    {                                                                                                               \
        attn_row_avx512_body(KDT, q, Kh, Vh, nk, d, sp, mode, max_keys, prob_dt, out_dt, sc, ms, ls, acc, part, out); \
    }
ATTN_ROW_INSTANCE(attn_row_avx512, RC_F32)
ATTN_ROW_INSTANCE(attn_row_avx512_bf16, RC_BF16)
ATTN_ROW_INSTANCE(attn_row_avx512_f16, RC_F16)
#undef ATTN_ROW_INSTANCE

/* rco_exp64 on 8 lanes: the same operations (fma, scalef = ldexp: exact, or
 * rounded once into the subnormals), so the same bits */
AVX512_FN static inline __m512d exp64_avx512(__m512d x)
{
    const __mmask8 live = _mm512_cmp_pd_mask(x, _mm512_set1_pd(-750.0), _CMP_GT_OQ) &
                          _mm512_cmp_pd_mask(x, _mm512_set1_pd(710.0), _CMP_LE_OQ);
    const __m512d xc = _mm512_maskz_mov_pd(live, x); /* lanes outside computed on 0, replaced below */
    const __m512d shift = _mm512_set1_pd(RCO_EXP64_SHIFT);
    const __m512d n = _mm512_sub_pd(_mm512_fmadd_pd(xc, _mm512_set1_pd(RCO_EXP64_LOG2E), shift), shift);
    __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(RCO_EXP64_LN2_HI), xc);
    r = _mm512_fnmadd_pd(n, _mm512_set1_pd(RCO_EXP64_LN2_LO), r);
    __m512d p;
    RCO_EXP64_POLY(p, r, _mm512_fmadd_pd, _mm512_set1_pd);
    p = _mm512_scalef_pd(p, n);
    /* outside: NaN stays (x itself), x <= -750 gives 0, x > 710 +inf */
    const __mmask8 big = _mm512_cmp_pd_mask(x, _mm512_set1_pd(710.0), _CMP_GT_OQ);
    const __mmask8 nan = _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q);
    __m512d outside = _mm512_mask_mov_pd(_mm512_setzero_pd(), big, _mm512_set1_pd(INFINITY));
    outside = _mm512_mask_mov_pd(outside, nan, x);
    return _mm512_mask_mov_pd(outside, live, p);
}

/* sum over i, in order, of rco_exp64((double)z_i - (double)mx) with z_i =
 * rco_lp_z(x, i, T, RC_F32): rco_logprob_row's fp32 sum, the exps 8 at a time */
AVX512_FN static double lse_sum_avx512(const float *x, int64_t V, float T, float mx)
{
    double sum = 0.0;
    const __m512d m = _mm512_set1_pd((double)mx);
    const __m256 t = _mm256_set1_ps(T);
    double e[8];
    int64_t i = 0;
    for (; i + 8 <= V; i += 8) {
        __m256 z = _mm256_loadu_ps(x + i);
        if (T != 1.0f)
            z = _mm256_div_ps(z, t);
        _mm512_storeu_pd(e, exp64_avx512(_mm512_sub_pd(_mm512_cvtps_pd(z), m)));
        for (int j = 0; j < 8; j++)
            sum += e[j];
    }
    for (; i < V; i++)
        sum += rco_exp64((double)rco_lp_z(x, i, T, RC_F32) - (double)mx);
    return sum;
}

AVX512_FN static void exp64_floats_avx512(const float *x, int64_t n, double *out)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm512_storeu_pd(out + i, exp64_avx512(_mm512_cvtps_pd(_mm256_loadu_ps(x + i))));
    for (; i < n; i++)
        out[i] = rco_exp64((double)x[i]);
}

/* n bf16 / fp16 values widened (exactly) to fp32 */
AVX512_FN static void widen16_avx512(float *dst, const uint16_t *src, int64_t n, rc_dtype dt)
{
    int64_t i = 0;
    if (dt == RC_BF16)
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, uk_loadw(RC_BF16, src, i));
    else
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, uk_loadw(RC_F16, src, i));
    rc_wt_convert((rc_wt){src + i, dt, false}, 0, n - i, RC_F32, RC_F32, dst + i);
}

/* one compiled instance per weight storage dtype and chunk merge (each its
 * own function: inlined together they spill registers); C: the order's chunk.
 * One chunk (C >= K: invariant kernels) is the sums-merge code. */
#define GEMM_BLOCK_INSTANCE(NAME, WDT)                                                                            \
    AVX512_FN static __attribute__((noinline)) void NAME##_sums(                                              \
        const float *x, int64_t ldx, int64_t K, const void *W, int64_t ldw, int64_t w_n0, const float *bias,     \
        rc_dtype out_dt, float *y, int64_t N, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t C)          \
    {                                                                                                             \
        gemm_block_avx512(WDT, 0, x, ldx, K, W, ldw, w_n0, bias, out_dt, y, N, m0, m1, n0, n1, C);               \
    }                                                                                                             \
    AVX512_FN static __attribute__((noinline)) void NAME##_lanes(                                             \
        const float *x, int64_t ldx, int64_t K, const void *W, int64_t ldw, int64_t w_n0, const float *bias,     \
        rc_dtype out_dt, float *y, int64_t N, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t C)          \
    {                                                                                                             \
        gemm_block_avx512(WDT, 1, x, ldx, K, W, ldw, w_n0, bias, out_dt, y, N, m0, m1, n0, n1, C);               \
    }                                                                                                             \
    AVX512_FN static __attribute__((noinline)) void NAME##_kb_sums(                                           \
        const float *x, int64_t ldx, int64_t K, const void *W, int64_t ldw, int64_t w_n0, const float *bias,     \
        rc_dtype out_dt, float *y, int64_t N, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t C)          \
    {                                                                                                             \
        gemm_block_avx512_kb(WDT, x, ldx, K, W, ldw, w_n0, bias, out_dt, y, N, m0, m1, n0, n1, C);               \
    }                                                                                                             \
    AVX512_FN static void NAME(const float *x, int64_t ldx, int64_t K, const void *W, int64_t ldw, int64_t w_n0,  \
                               const float *bias, rc_dtype out_dt, float *y, int64_t N, int64_t m0, int64_t m1,   \
                               int64_t n0, int64_t n1, rco_gemm_order o)                                          \
    {                                                                                                             \
        if (K > 2 * GEMM_K_BLOCK && (o.sums || o.chunk >= K))                                                     \
            NAME##_kb_sums(x, ldx, K, W, ldw, w_n0, bias, out_dt, y, N, m0, m1, n0, n1, o.chunk);                 \
        else if (o.sums || o.chunk >= K)                                                                          \
            NAME##_sums(x, ldx, K, W, ldw, w_n0, bias, out_dt, y, N, m0, m1, n0, n1, o.chunk);                    \
        else                                                                                                      \
            NAME##_lanes(x, ldx, K, W, ldw, w_n0, bias, out_dt, y, N, m0, m1, n0, n1, o.chunk);                   \
    }
GEMM_BLOCK_INSTANCE(gemm_block_f32, RC_F32)
GEMM_BLOCK_INSTANCE(gemm_block_bf16, RC_BF16)
GEMM_BLOCK_INSTANCE(gemm_block_f16, RC_F16)
#undef GEMM_BLOCK_INSTANCE

/* One block, the weights as stored (fp32, or bf16 / fp16 widened in registers) */
AVX512_FN static void gemm_block_avx512_any(rc_wt W, int64_t ldw, const float *x, int64_t ldx, int64_t K,
                                            const float *bias, rc_dtype out_dt, float *y, int64_t N, int64_t m0,
                                            int64_t m1, int64_t n0, int64_t n1, rco_gemm_order C)
{
    if (W.dt == RC_BF16)
        gemm_block_bf16(x, ldx, K, W.p, ldw, 0, bias, out_dt, y, N, m0, m1, n0, n1, C);
    else if (W.dt == RC_F16)
        gemm_block_f16(x, ldx, K, W.p, ldw, 0, bias, out_dt, y, N, m0, m1, n0, n1, C);
    else
        gemm_block_f32(x, ldx, K, W.p, ldw, 0, bias, out_dt, y, N, m0, m1, n0, n1, C);
}

/* Columns [n0, n1) of every row block of a GEMM with more rows than one
 * register tile: the weight rows copied once into panel (GEMM_N_BLOCK rows
 * of K floats, ldp = K rounded up to 16 apart, this thread's, 64-byte
 * aligned) and the fp32 kernel reads them there for all M rows. 2-byte
 * weights are widened (exactly); fp32 weights are copied when their rows are
 * not 64-byte aligned (a checkpoint read in place: every 16-float load of an
 * unaligned row spans two cache lines). The same values in the same order:
 * the results do not change. */
AVX512_FN static void gemm_cols_avx512_panel(rc_wt W, int64_t ldw, const float *x, int64_t ldx, int64_t M,
                                             int64_t K, const float *bias, rc_dtype out_dt, float *y, int64_t N,
                                             int64_t n0, int64_t n1, rco_gemm_order C, float *panel)
{
    const int64_t ldp = (K + 15) / 16 * 16;
    if (W.dt == RC_F32) {
        for (int64_t n = n0; n < n1; n++)
            memcpy(panel + (n - n0) * ldp, (const float *)W.p + n * ldw, (size_t)K * sizeof *panel);
    } else if (ldw == K && ldp == K) {
        widen16_avx512(panel, (const uint16_t *)W.p + n0 * K, (n1 - n0) * K, W.dt);
    } else { /* a K-slice or a K off the 16 grid: its rows one by one, packed ldp apart */
        for (int64_t n = n0; n < n1; n++)
            widen16_avx512(panel + (n - n0) * ldp, (const uint16_t *)W.p + n * ldw, K, W.dt);
    }
    for (int64_t m0 = 0; m0 < M; m0 += GEMM_M_BLOCK) {
        const int64_t m1 = m0 + GEMM_M_BLOCK < M ? m0 + GEMM_M_BLOCK : M;
        gemm_block_f32(x, ldx, K, panel, ldp, n0, bias, out_dt, y, N, m0, m1, n0, n1, C);
    }
}

/* ---- the bf16 pair order (rco_gemm_dot_pairs) -------------------------------
 * Operands packed as bf16: x's rows rounded (rc_f32_to_bf16, exact for bf16
 * values) and zero-padded to Kp = K rounded up to 32, so every 32-element
 * step reads whole registers; W read as stored (bf16, its last step masked
 * past K) or, stored as fp32, packed like x. Every chunk starts at a multiple
 * of 32, so the zero padding is the order's own. Three kernels:
 *   dp:  vdpbf16ps, one per 32 elements and output (AVX512-BF16);
 *   emu: the same two steps with vfmadd231ps under MXCSR DAZ | FTZ (flush
 *        denormal inputs and results to zeros of their sign, tininess after
 *        rounding: rco_dpbf16_step), the odd elements (each 32-bit word's
 *        high half) first, then the even ones (the low half shifted up);
 *   emf: emu's steps on operands widened once to fp32, each block of 32 as
 *        its 16 odd elements then its 16 even ones (gemm_pairs_emf), so the
 *        inner loop has no shifts or masks: the fp32 kernel's instructions.
 * Which instruction path is trusted is decided once (gemm_pairs_path: each
 * is used only after it gave rco_gemm_dot_pairs's bits on the check
 * vectors); which kernel runs a GEMM, by its rows and the CPU's speed
 * (gemm_pairs_route). On an Intel Xeon with AVX512-FP16 and AMX (Sapphire
 * Rapids or later) vdpbf16ps was measured at one per two cycles, occupying
 * both FMA ports meanwhile: 32 multiply-adds per two cycles against 64 for
 * two FMAs, so there the FMAs do the compute-bound GEMMs. */
#define AVX512BF16_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

/* 32 bf16 of W from element k (mk: the elements before W's end) */
AVX512_FN static inline __attribute__((always_inline)) __m512i ukp_loadw(const uint16_t *W, int64_t k, int64_t kend)
{
    if (k + 32 <= kend)
        return _mm512_loadu_si512((const void *)(W + k));
    const __mmask32 mk = (__mmask32)((1ull << (kend - k)) - 1ull);
    return _mm512_maskz_loadu_epi16(mk, W + k);
}

/* acc = the 16 lanes of chunk [k, k1) (k1 <= Kp) for mr x nr outputs; x
 * rows ldx apart (padded), W rows ldw apart with kw elements each */
AVX512BF16_FN static inline __attribute__((always_inline)) void
ukp_chunk_dp(const int mr, const int nr, const uint16_t *x, int64_t ldx, const uint16_t *W, int64_t ldw, int64_t kw,
             int64_t k, int64_t k1, __m512 acc[UK_MR][UK_NR])
{
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (; k < k1; k += 32) {
        __m512i w[UK_NR];
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            w[j] = ukp_loadw(W + j * ldw, k, kw);
            __asm__("" : "+v"(w[j]));
        }
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            __m512i a = _mm512_loadu_si512((const void *)(x + i * ldx + k));
            __asm__("" : "+v"(a));
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)a, (__m512bh)w[j]);
        }
    }
}

AVX512_FN static inline __attribute__((always_inline)) void
ukp_chunk_emu(const int mr, const int nr, const uint16_t *x, int64_t ldx, const uint16_t *W, int64_t ldw, int64_t kw,
              int64_t k, int64_t k1, __m512 acc[UK_MR][UK_NR])
{
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (; k < k1; k += 32) {
        __m512i w[UK_NR];
        __m512 wf[UK_NR];
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            w[j] = ukp_loadw(W + j * ldw, k, kw);
            wf[j] = _mm512_castsi512_ps(_mm512_and_si512(w[j], hi)); /* the odd elements */
            __asm__("" : "+v"(wf[j]));
        }
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512((const void *)(x + i * ldx + k)), hi));
            __asm__("" : "+v"(a));
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                acc[i][j] = _mm512_fmadd_ps(a, wf[j], acc[i][j]);
        }
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            wf[j] = _mm512_castsi512_ps(_mm512_slli_epi32(w[j], 16)); /* then the even ones */
            __asm__("" : "+v"(wf[j]));
        }
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512((const void *)(x + i * ldx + k)), 16));
            __asm__("" : "+v"(a));
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                acc[i][j] = _mm512_fmadd_ps(a, wf[j], acc[i][j]);
        }
    }
}

/* the emulation on operands widened once (gemm_pairs_widen): each 32-element
 * block holds the odd elements' fp32 values (16), then the even ones' (16),
 * so the inner loop is the fp32 kernel's: a load and one FMA per output and
 * 16 elements, the same count as the 16-lane fp32 order */
AVX512_FN static inline __attribute__((always_inline)) void
ukp_chunk_emf(const int mr, const int nr, const float *x, int64_t ldx, const float *W, int64_t ldw, int64_t kw,
              int64_t k, int64_t k1, __m512 acc[UK_MR][UK_NR])
{
    (void)kw; /* widened operands are padded to a multiple of 32 */
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (; k < k1; k += 16) { /* odd half, then even half of each block */
        __m512 wf[UK_NR];
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            wf[j] = _mm512_loadu_ps(W + j * ldw + k);
            __asm__("" : "+v"(wf[j]));
        }
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            __m512 a = _mm512_loadu_ps(x + i * ldx + k);
            __asm__("" : "+v"(a));
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                acc[i][j] = _mm512_fmadd_ps(a, wf[j], acc[i][j]);
        }
    }
}

/* rco_gemm_dot_pairs of mr x nr outputs: ukernel's two merges over the pair
 * chunks; a NaN becomes the quiet NaN 0x7fc00000 */
#define UKP_KERNEL(NAME, CHUNK, ATTR, T)                                                                            \
    ATTR static inline __attribute__((always_inline)) void NAME(                                                    \
        const int mr, const int nr, const int lanes, const T *x, int64_t ldx, int64_t Kp, const T *W,               \
        int64_t ldw, int64_t kw, int64_t C, float out[UK_MR][UK_NR])                                                \
    {                                                                                                               \
        __m512 tot[UK_MR][UK_NR], acc[UK_MR][UK_NR];                                                                \
        float r[UK_MR * UK_NR];                                                                                     \
        CHUNK(mr, nr, x, ldx, W, ldw, kw, 0, C < Kp ? C : Kp, tot);                                                 \
        if (!lanes) {                                                                                               \
            trees_tile(mr, nr, tot, r);                                                                             \
            _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++) _Pragma("GCC unroll 8") for (int j = 0; j < nr;    \
                                                                                          j++) out[i][j] =          \
                r[i * nr + j];                                                                                      \
            for (int64_t k0 = C; k0 < Kp; k0 += C) {                                                                \
                CHUNK(mr, nr, x, ldx, W, ldw, kw, k0, Kp - k0 < C ? Kp : k0 + C, acc);                              \
                trees_tile(mr, nr, acc, r);                                                                         \
                _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++) _Pragma("GCC unroll 8") for (int j = 0;        \
                                                                                              j < nr; j++)          \
                    out[i][j] += r[i * nr + j];                                                                     \
            }                                                                                                       \
        } else if (mr * nr <= UK_MR_L * UK_NR_L) { /* the running lanes in registers (a constant after inlining) */  \
            for (int64_t k0 = C; k0 < Kp; k0 += C) {                                                                \
                CHUNK(mr, nr, x, ldx, W, ldw, kw, k0, Kp - k0 < C ? Kp : k0 + C, acc);                              \
                _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++) _Pragma("GCC unroll 8") for (int j = 0;        \
                                                                                              j < nr; j++)          \
                    tot[i][j] = _mm512_add_ps(tot[i][j], acc[i][j]);                                                \
            }                                                                                                       \
            trees_tile(mr, nr, tot, r);                                                                             \
            _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++) _Pragma("GCC unroll 8") for (int j = 0; j < nr;    \
                                                                                          j++) out[i][j] =          \
                r[i * nr + j];                                                                                      \
        } else { /* a larger tile: the running lanes in memory, as ukernel's */                                    \
            float run[UK_MR * UK_NR * 16] __attribute__((aligned(64)));                                             \
            _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++) _Pragma("GCC unroll 8") for (int j = 0; j < nr;    \
                                                                                          j++)                      \
                _mm512_store_ps(run + (i * UK_NR + j) * 16, tot[i][j]);                                             \
            for (int64_t k0 = C; k0 < Kp; k0 += C) {                                                                \
                CHUNK(mr, nr, x, ldx, W, ldw, kw, k0, Kp - k0 < C ? Kp : k0 + C, acc);                              \
                _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++) _Pragma("GCC unroll 8") for (int j = 0;        \
                                                                                              j < nr; j++)          \
                    _mm512_store_ps(run + (i * UK_NR + j) * 16,                                                     \
                                    _mm512_add_ps(_mm512_load_ps(run + (i * UK_NR + j) * 16), acc[i][j]));          \
            }                                                                                                       \
            _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++) _Pragma("GCC unroll 8") for (int j = 0; j < nr;    \
                                                                                          j++) tot[i][j] =          \
                _mm512_load_ps(run + (i * UK_NR + j) * 16);                                                         \
            trees_tile(mr, nr, tot, r);                                                                             \
            _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++) _Pragma("GCC unroll 8") for (int j = 0; j < nr;    \
                                                                                          j++) out[i][j] =          \
                r[i * nr + j];                                                                                      \
        }                                                                                                           \
        for (int i = 0; i < mr; i++)                                                                                \
            for (int j = 0; j < nr; j++)                                                                            \
                if (out[i][j] != out[i][j])                                                                         \
                    out[i][j] = rc_bits_f32(0x7fc00000u);                                                           \
    }
UKP_KERNEL(ukp_kernel_dp, ukp_chunk_dp, AVX512BF16_FN, uint16_t)
UKP_KERNEL(ukp_kernel_emu, ukp_chunk_emu, AVX512_FN, uint16_t)
UKP_KERNEL(ukp_kernel_emf, ukp_chunk_emf, AVX512_FN, float)
#undef UKP_KERNEL

/* rows [m0, m1) x columns [n0, n1) of the pair-order GEMM: x packed [M, Kp],
 * W's row n at W + n * ldw with kw elements */
#define UKP_BLOCK(NAME, KERNEL, ATTR, T, FULL)                                                                      \
    ATTR static inline __attribute__((always_inline)) void NAME##_body(                                             \
        const int lanes, const T *x, int64_t Kp, const T *W, int64_t ldw, int64_t kw, int64_t w_n0,                 \
        const float *bias, rc_dtype out_dt, float *y, int64_t N, int64_t m0, int64_t m1, int64_t n0, int64_t n1,   \
        int64_t C)                                                                                                  \
    {                                                                                                               \
        const int MR = lanes && !FULL ? UK_MR_L : UK_MR, NR = lanes && !FULL ? UK_NR_L : UK_NR;                     \
        for (int64_t m = m0; m < m1; m += MR) {                                                                     \
            const int mr = m1 - m < MR ? (int)(m1 - m) : MR;                                                        \
            for (int64_t n = n0; n < n1; n += NR) {                                                                 \
                const int nr = n1 - n < NR ? (int)(n1 - n) : NR;                                                    \
                const T *xm = x + m * Kp, *Wn = W + (n - w_n0) * ldw; /* W's first row is w_n0 */                  \
                float out[UK_MR][UK_NR];                                                                            \
                if (lanes) {                                                                                        \
                    switch (mr * 8 + nr) {                                                                          \
                        UKP_ROW_L(KERNEL, 1) UKP_ROW_L(KERNEL, 2) UKP_ROW_L(KERNEL, 3) UKP_ROW_L(KERNEL, 4)         \
                        UKP_ROW_L(KERNEL, 5) UKP_ROW_L(KERNEL, 6)                                                   \
                    default: break;                                                                                 \
                    }                                                                                               \
                } else {                                                                                            \
                    switch (mr * 8 + nr) {                                                                          \
                        UKP_ROW_S(KERNEL, 1) UKP_ROW_S(KERNEL, 2) UKP_ROW_S(KERNEL, 3) UKP_ROW_S(KERNEL, 4)         \
                        UKP_ROW_S(KERNEL, 5) UKP_ROW_S(KERNEL, 6)                                                   \
                    default: break;                                                                                 \
                    }                                                                                               \
                }                                                                                                   \
                for (int i = 0; i < mr; i++)                                                                        \
                    for (int j = 0; j < nr; j++) {                                                                  \
                        float v = out[i][j];                                                                        \
                        y[(m + i) * N + n + j] = rc_round_to(bias ? v + bias[n + j] : v, out_dt);                   \
                    }                                                                                               \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
    ATTR static __attribute__((noinline)) void NAME##_sums(const T *x, int64_t Kp, const T *W,                      \
                                                           int64_t ldw, int64_t kw, int64_t w_n0, const float *bias, \
                                                           rc_dtype out_dt, float *y, int64_t N, int64_t m0,        \
                                                           int64_t m1, int64_t n0, int64_t n1, int64_t C)           \
    {                                                                                                               \
        NAME##_body(0, x, Kp, W, ldw, kw, w_n0, bias, out_dt, y, N, m0, m1, n0, n1, C);                             \
    }                                                                                                               \
    ATTR static __attribute__((noinline)) void NAME##_lanes(const T *x, int64_t Kp, const T *W,                     \
                                                            int64_t ldw, int64_t kw, int64_t w_n0, const float *bias,\
                                                            rc_dtype out_dt, float *y, int64_t N, int64_t m0,       \
                                                            int64_t m1, int64_t n0, int64_t n1, int64_t C)          \
    {                                                                                                               \
        NAME##_body(1, x, Kp, W, ldw, kw, w_n0, bias, out_dt, y, N, m0, m1, n0, n1, C);                             \
    }
#define UKP_CASE(KERNEL, L, MR, NR)                                                                                 \
    case (MR) * 8 + (NR): KERNEL(MR, NR, L, xm, Kp, Kp, Wn, ldw, kw, C, out); break;
#define UKP_ROW_L(KERNEL, MR)                                                                                       \
    UKP_CASE(KERNEL, 1, MR, 1) UKP_CASE(KERNEL, 1, MR, 2) UKP_CASE(KERNEL, 1, MR, 3) UKP_CASE(KERNEL, 1, MR, 4)
#define UKP_ROW_S(KERNEL, MR)                                                                                       \
    UKP_CASE(KERNEL, 0, MR, 1) UKP_CASE(KERNEL, 0, MR, 2) UKP_CASE(KERNEL, 0, MR, 3) UKP_CASE(KERNEL, 0, MR, 4)
/* FULL: the lanes merge on the 6 x 4 tile (emf: one register per operand
 * vector); dp and emu keep 4 x 3 with the running lanes in registers (emu's
 * split operands take the registers a larger tile needs) */
UKP_BLOCK(gemm_pairs_dp, ukp_kernel_dp, AVX512BF16_FN, uint16_t, 0)
UKP_BLOCK(gemm_pairs_emu, ukp_kernel_emu, AVX512_FN, uint16_t, 0)
UKP_BLOCK(gemm_pairs_emf, ukp_kernel_emf, AVX512_FN, float, 1)
#undef UKP_BLOCK
#undef UKP_CASE
#undef UKP_ROW_L
#undef UKP_ROW_S

/* One block of the pair-order GEMM on path dp (1) or emu (0); emu sets
 * MXCSR's DAZ and FTZ for the block and restores the thread's own after */
static void gemm_pairs_block(int dp, const uint16_t *x, int64_t Kp, const uint16_t *W, int64_t ldw, int64_t kw,
                             int64_t w_n0, const float *bias, rc_dtype out_dt, float *y, int64_t N, int64_t m0,
                             int64_t m1, int64_t n0, int64_t n1, rco_gemm_order o)
{
    const bool lanes = !o.sums && o.chunk < Kp;
    if (dp) {
        (lanes ? gemm_pairs_dp_lanes : gemm_pairs_dp_sums)(x, Kp, W, ldw, kw, w_n0, bias, out_dt, y, N, m0, m1, n0,
                                                          n1, o.chunk);
        return;
    }
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ (bit 15), DAZ (bit 6) */
    (lanes ? gemm_pairs_emu_lanes : gemm_pairs_emu_sums)(x, Kp, W, ldw, kw, w_n0, bias, out_dt, y, N, m0, m1, n0,
                                                         n1, o.chunk);
    _mm_setcsr(csr);
}

/* The emulation on widened operands (gemm_pairs_widen's layout), MXCSR's
 * DAZ and FTZ set for the block as gemm_pairs_block's emu */
static void gemm_pairs_block_emf(const float *x, int64_t Kp, const float *W, int64_t w_n0, const float *bias,
                                 rc_dtype out_dt, float *y, int64_t N, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                                 rco_gemm_order o)
{
    const bool lanes = !o.sums && o.chunk < Kp;
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ (bit 15), DAZ (bit 6) */
    (lanes ? gemm_pairs_emf_lanes : gemm_pairs_emf_sums)(x, Kp, W, Kp, Kp, w_n0, bias, out_dt, y, N, m0, m1, n0, n1,
                                                         o.chunk);
    _mm_setcsr(csr);
}

/* Seconds for r rounds of 12 independent vdpbf16ps (dp) or, for the same
 * multiply-adds, of 24 independent vfmadd231ps */
AVX512BF16_FN static double dpbf16_rate_time(int dp, int r)
{
    __m512 a[24];
    for (int i = 0; i < 24; i++)
        a[i] = _mm512_set1_ps((float)i);
    const __m512i u = _mm512_set1_epi32(0x3f803f80), v = _mm512_set1_epi32(0x3f7f3f7f);
    const __m512 f = _mm512_set1_ps(0.5f), g = _mm512_set1_ps(0.25f);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (dp) {
        for (int k = 0; k < r; k++)
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) {
                a[i] = _mm512_dpbf16_ps(a[i], (__m512bh)u, (__m512bh)v);
                __asm__("" ::"v"(a[i]));
            }
    } else {
        for (int k = 0; k < r; k++)
#pragma GCC unroll 24
            for (int i = 0; i < 24; i++) {
                a[i] = _mm512_fmadd_ps(a[i], f, g);
                __asm__("" ::"v"(a[i]));
            }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    __m512 sum = a[0];
    for (int i = 1; i < 24; i++)
        sum = _mm512_add_ps(sum, a[i]);
    volatile float sink = _mm512_reduce_add_ps(sum); /* keeps the loops */
    (void)sink;
    return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

/* Whether vdpbf16ps does this CPU's bf16 multiply-adds faster than pairs of
 * FMAs (half as fast on the Intel Xeon above; expected faster where 512-bit
 * FMAs are split in two, AMD Zen 4). The fastest of 7 tries of each, about
 * 2 us apiece; which way it goes changes only the speed, never the bits */
static void dpbf16_rates(double *tdp, double *tfma)
{
    *tdp = *tfma = 1e9;
    for (int t = 0; t < 7; t++) {
        const double a = dpbf16_rate_time(1, 256), b = dpbf16_rate_time(0, 256);
        *tdp = a < *tdp ? a : *tdp;
        *tfma = b < *tfma ? b : *tfma;
    }
}

static bool dpbf16_faster(void)
{
    double tdp, tfma;
    dpbf16_rates(&tdp, &tfma);
    return tdp < tfma;
}

AVX512BF16_FN static void dpbf16_raw(const uint16_t a[32], const uint16_t b[32], float acc[16])
{
    _mm512_storeu_ps(acc, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512((const void *)a),
                                           (__m512bh)_mm512_loadu_si512((const void *)b)));
}
#endif

static bool gemm_use_avx512(void)
{
#ifdef RC_GEMM_AVX512
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") && !getenv("RC_GEMM_PORTABLE");
    return have;
#else
    return false;
#endif
}

/* n bf16 / fp16 values widened (exactly) to fp32: the GEMM's weight panels,
 * the attention's keys and values */
static void widen16(float *dst, const uint16_t *src, int64_t n, rc_dtype dt)
{
#ifdef RC_GEMM_AVX512
    if (gemm_use_avx512()) {
        widen16_avx512(dst, src, n, dt);
        return;
    }
#endif
    rc_wt_convert((rc_wt){src, dt, false}, 0, n, RC_F32, RC_F32, dst);
}

/* the value of W's element i as a float (fp32, bf16 or fp16 storage) */
static float wt_at(rc_wt W, int64_t i)
{
    if (W.dt == RC_BF16)
        return rc_bf16_to_f32(((const uint16_t *)W.p)[i]);
    if (W.dt == RC_F16)
        return rc_f16_to_f32(((const uint16_t *)W.p)[i]);
    return ((const float *)W.p)[i];
}

#ifdef RC_GEMM_AVX512
/* n values from src (its element i at src + i) widened into one row of the
 * emulation's layout: per block of 32, the odd elements' bf16 values as
 * fp32, then the even ones'; zeros past n, up to Kp */
static void gemm_pairs_widen(rc_wt W, int64_t off, const float *src, int64_t n, int64_t Kp, float *dst)
{
    for (int64_t b = 0; b < Kp; b += 32)
        for (int j = 0; j < 16; j++) {
            const int64_t e = b + 2 * j, od = e + 1;
            float ve = 0.0f, vo = 0.0f;
            if (src) {
                ve = e < n ? rc_bf16_to_f32(rc_f32_to_bf16(src[e])) : 0.0f;
                vo = od < n ? rc_bf16_to_f32(rc_f32_to_bf16(src[od])) : 0.0f;
            } else if (W.dt == RC_BF16) {
                const uint16_t *w = (const uint16_t *)W.p + off;
                ve = e < n ? rc_bf16_to_f32(w[e]) : 0.0f;
                vo = od < n ? rc_bf16_to_f32(w[od]) : 0.0f;
            } else {
                ve = e < n ? rc_bf16_to_f32(rc_f32_to_bf16(wt_at(W, off + e))) : 0.0f;
                vo = od < n ? rc_bf16_to_f32(rc_f32_to_bf16(wt_at(W, off + od))) : 0.0f;
            }
            dst[b + j] = vo;
            dst[b + 16 + j] = ve;
        }
}

/* gemm_pairs_widen of a bf16 row: each 32-bit word's high half (the odd
 * element) and its low half shifted up (the even one) are their fp32 values */
AVX512_FN static void gemm_pairs_widen_bf16(const uint16_t *w, int64_t n, int64_t Kp, float *dst)
{
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t b = 0; b < Kp; b += 32) {
        const __m512i v = ukp_loadw(w, b, n);
        _mm512_storeu_si512((void *)(dst + b), _mm512_and_si512(v, hi));
        _mm512_storeu_si512((void *)(dst + b + 16), _mm512_slli_epi32(v, 16));
    }
}

/* gemm_pairs_widen of n fp32 values (x's rows, fp32-stored weights): each
 * rounded to bf16 as rc_f32_to_bf16 (to nearest even, a NaN kept quiet),
 * 16 at a time, then the odd elements of each 32 and the even ones */
AVX512_FN static void gemm_pairs_widen_f32(const float *src, int64_t n, int64_t Kp, float *dst)
{
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i one = _mm512_set1_epi32(1), r7 = _mm512_set1_epi32(0x7fff), hi = _mm512_set1_epi32((int)0xffff0000u);
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000), q = _mm512_set1_epi32(0x400000);
    for (int64_t b = 0; b < Kp; b += 32) {
        __m512i v[2];
        for (int h = 0; h < 2; h++) {
            const int64_t k = b + 16 * h, left = n - k;
            const __mmask16 mk = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u);
            const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(mk, src + (k < n ? k : 0)));
            const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
            const __m512i rn = _mm512_add_epi32(_mm512_add_epi32(u, r7), _mm512_and_si512(_mm512_srli_epi32(u, 16), one));
            /* the bf16 bits in the high half: rounded, or a NaN's high half with its quiet bit set */
            v[h] = _mm512_mask_or_epi32(_mm512_and_si512(rn, hi), nan, _mm512_and_si512(u, hi), q);
        }
        _mm512_storeu_si512((void *)(dst + b), _mm512_permutex2var_epi32(v[0], odd, v[1]));
        _mm512_storeu_si512((void *)(dst + b + 16), _mm512_permutex2var_epi32(v[0], even, v[1]));
    }
}

/* The pair order by the emulation on widened operands (ukp_chunk_emf): x's
 * rows widened once, W one column block at a time into this thread's panel,
 * read there by every row block; the same steps as gemm_pairs' paths (the
 * same bits), with the fp32 kernel's instruction count. One parallel region
 * (x widened, static; then the column blocks taken one at a time from a
 * shared counter): one fork and join per GEMM. Operands and panels in be's
 * scratch (be NULL: allocated). */
static rc_status gemm_pairs_emf(rc_backend *be, const float *x, int64_t ldx, int64_t M, int64_t K, rc_wt W,
                                int64_t ldw, int64_t N, const float *bias, rc_dtype out_dt, float *y, rco_gemm_order o)
{
    const int64_t Kp = (K + 31) / 32 * 32;
    const int64_t xn = (M * Kp + 15) / 16 * 16, pn = (int64_t)omp_get_max_threads() * GEMM_N_BLOCK * Kp;
    float *buf = NULL, *own = NULL;
    if (be)
        RC_TRY(cpu_scratch(be, xn + pn, &buf));
    else {
        RC_TRY(rc_alloc_aligned((void **)&own, xn + pn, sizeof *own, "matmul operands"));
        buf = own;
    }
    float *const xf = buf, *const panels = buf + xn;
    const int64_t nb = (N + GEMM_N_BLOCK - 1) / GEMM_N_BLOCK;
    int64_t next = 0; /* the next unclaimed column block */
#pragma omp parallel if (nb > 1 || M * Kp >= 65536)
    {
#pragma omp for schedule(static)
        for (int64_t m = 0; m < M; m++)
            gemm_pairs_widen_f32(x + m * ldx, K, Kp, xf + m * Kp);
        float *pan = panels + (int64_t)omp_get_thread_num() * GEMM_N_BLOCK * Kp;
        for (int64_t bn; (bn = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED)) < nb;) {
            const int64_t n0 = bn * GEMM_N_BLOCK, n1 = n0 + GEMM_N_BLOCK < N ? n0 + GEMM_N_BLOCK : N;
            for (int64_t n = n0; n < n1; n++) {
                if (W.dt == RC_BF16)
                    gemm_pairs_widen_bf16((const uint16_t *)W.p + n * ldw, K, Kp, pan + (n - n0) * Kp);
                else if (W.dt == RC_F32)
                    gemm_pairs_widen_f32((const float *)W.p + n * ldw, K, Kp, pan + (n - n0) * Kp);
                else
                    gemm_pairs_widen(W, n * ldw, NULL, K, Kp, pan + (n - n0) * Kp);
            }
            for (int64_t m0 = 0; m0 < M; m0 += GEMM_M_BLOCK) {
                const int64_t m1 = m0 + GEMM_M_BLOCK < M ? m0 + GEMM_M_BLOCK : M;
                gemm_pairs_block_emf(xf, Kp, pan, n0, bias, out_dt, y, N, m0, m1, n0, n1, o);
            }
        }
    }
    free(own);
    return RC_OK;
}

/* y[M, N] = R(x . W^T + bias) in the pair order o on path 2 (vdpbf16ps) or
 * 1 (emulated): x's rows packed once as bf16, padded to Kp; W read as stored
 * when bf16, else packed the same way */
static rc_status gemm_pairs(int path, const float *x, int64_t ldx, int64_t M, int64_t K, rc_wt W, int64_t ldw,
                            int64_t N, const float *bias, rc_dtype out_dt, float *y, rco_gemm_order o)
{
    const int64_t Kp = (K + 31) / 32 * 32;
    uint16_t *xb = NULL, *wb = NULL;
    RC_TRY(rc_alloc_aligned((void **)&xb, M * Kp, sizeof *xb, "matmul operands"));
#pragma omp parallel for schedule(static) if (M * Kp >= 65536)
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < Kp; k++)
            xb[m * Kp + k] = k < K ? rc_f32_to_bf16(x[m * ldx + k]) : 0;
    const uint16_t *Wp = (const uint16_t *)W.p;
    int64_t lw = ldw, kw = K;
    if (W.dt != RC_BF16) {
        rc_status st = rc_alloc_aligned((void **)&wb, N * Kp, sizeof *wb, "matmul operands");
        if (st != RC_OK) {
            free(xb);
            return st;
        }
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < Kp; k++)
                wb[n * Kp + k] = k < K ? rc_f32_to_bf16(wt_at(W, n * ldw + k)) : 0;
        Wp = wb, lw = Kp, kw = Kp;
    }
    const int64_t nb = (N + GEMM_N_BLOCK - 1) / GEMM_N_BLOCK, mb = (M + GEMM_M_BLOCK - 1) / GEMM_M_BLOCK;
    if (M > UK_MR && !wb) { /* more than one register tile of rows: a column block of W copied once into a
                             * panel (GEMM_N_BLOCK x Kp, zero-padded, this thread's) and read there by every
                             * row block (the same values: the results do not change) */
        uint16_t *panels = NULL;
        rc_status st = rc_alloc_aligned((void **)&panels, (int64_t)omp_get_max_threads() * GEMM_N_BLOCK * Kp,
                                        sizeof *panels, "matmul panels");
        if (st != RC_OK) {
            free(xb);
            return st;
        }
#pragma omp parallel for schedule(dynamic, 1) if (nb > 1)
        for (int64_t bn = 0; bn < nb; bn++) {
            const int64_t n0 = bn * GEMM_N_BLOCK, n1 = n0 + GEMM_N_BLOCK < N ? n0 + GEMM_N_BLOCK : N;
            uint16_t *pan = panels + (int64_t)omp_get_thread_num() * GEMM_N_BLOCK * Kp;
            for (int64_t n = n0; n < n1; n++) {
                memcpy(pan + (n - n0) * Kp, Wp + n * lw, (size_t)K * sizeof *pan);
                memset(pan + (n - n0) * Kp + K, 0, (size_t)(Kp - K) * sizeof *pan);
            }
            for (int64_t m0 = 0; m0 < M; m0 += GEMM_M_BLOCK) {
                const int64_t m1 = m0 + GEMM_M_BLOCK < M ? m0 + GEMM_M_BLOCK : M;
                gemm_pairs_block(path == 2, xb, Kp, pan, Kp, Kp, n0, bias, out_dt, y, N, m0, m1, n0, n1, o);
            }
        }
        free(panels);
        free(xb);
        return RC_OK;
    }
#pragma omp parallel for schedule(dynamic, 1) collapse(2) if (mb * nb > 1)
    for (int64_t bm = 0; bm < mb; bm++)
        for (int64_t bn = 0; bn < nb; bn++) {
            const int64_t n0 = bn * GEMM_N_BLOCK, n1 = n0 + GEMM_N_BLOCK < N ? n0 + GEMM_N_BLOCK : N;
            const int64_t m0 = bm * GEMM_M_BLOCK, m1 = m0 + GEMM_M_BLOCK < M ? m0 + GEMM_M_BLOCK : M;
            gemm_pairs_block(path == 2, xb, Kp, Wp, lw, kw, 0, bias, out_dt, y, N, m0, m1, n0, n1, o);
        }
    free(xb);
    free(wb);
    return RC_OK;
}

/* Path `path` against the plain-C twin on check vectors: moderate and wide
 * exponents, denormal operands, products at the edge of fp32's normal
 * range, infinities, zeros; K = 77 (a tail, three 32-blocks), both merges.
 * True when every output has the twin's bits. */
static bool gemm_pairs_check(int path)
{
    enum { M = 3, N = 5, K = 77 };
    float x[M * K], w[N * K], y[M * N];
    uint32_t r = 0x2545f491u;
    for (int i = 0; i < M * K + N * K; i++) {
        r = r * 1664525u + 1013904223u;
        const int row = i < M * K ? i / K : (i - M * K) / K, wide = i >= M * K ? row >= 3 : row == 2;
        uint32_t e = wide ? (r >> 8) % 255u : 107u + (r >> 8) % 41u;
        if (i >= M * K && row == 4)
            e = 60u + (r >> 8) % 8u; /* products near 2^-126 */
        if ((r >> 3) % 23u == 0)
            e = 0; /* zero or denormal */
        if (wide && (r >> 3) % 37u == 1)
            e = 255u, r &= ~(0x7fu << 16); /* an infinity */
        const float v = rc_bf16_to_f32((uint16_t)(((r >> 31) << 15) | (e << 7) | ((r >> 16) & 0x7fu)));
        if (i < M * K)
            x[i] = v;
        else
            w[i - M * K] = v;
    }
    for (int t = 0; t < (path == 2 ? 2 : 6); t++) { /* path 1: emu and emf, fp32 and bf16 weights */
        const rco_gemm_order o = {32, t % 2, 1};
        uint16_t wb[N * K];
        for (int i = 0; i < N * K; i++)
            wb[i] = rc_f32_to_bf16(w[i]);
        const rc_wt wt = t >= 4 ? (rc_wt){wb, RC_BF16, false} : rc_wt_f32(w);
        if ((t < 2 ? gemm_pairs(path, x, K, M, K, wt, K, N, NULL, RC_F32, y, o)
                   : gemm_pairs_emf(NULL, x, K, M, K, wt, K, N, NULL, RC_F32, y, o)) != RC_OK)
            return false;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++)
                if (rc_f32_bits(y[m * N + n]) != rc_f32_bits(rco_gemm_dot_pairs(x + m * K, w + n * K, K, 1, o)))
                    return false;
    }
    return true;
}
#endif

/* The pair order's path, decided once: 2, vdpbf16ps (AVX512-BF16, unless
 * RC_NO_AVX512BF16 is set); 1, the same steps emulated with AVX-512 FMAs; 0,
 * the plain-C twin. A path is taken only after it gave the twin's bits on
 * gemm_pairs_check's vectors (a few microseconds). */
static bool g_pairs_emu_ok; /* the emulation's kernels (emu, emf) gave the twin's bits */

static int gemm_pairs_path(void)
{
    static int path = -1;
    if (path < 0) {
        int p = 0;
#ifdef RC_GEMM_AVX512
        if (gemm_use_avx512()) {
            const char *no = getenv("RC_NO_AVX512BF16");
            g_pairs_emu_ok = gemm_pairs_check(1);
            if (!(no && *no && strcmp(no, "0")) && __builtin_cpu_supports("avx512bf16") && gemm_pairs_check(2))
                p = 2;
            else if (g_pairs_emu_ok)
                p = 1;
        }
#endif
        path = p;
    }
    return path;
}

#ifdef RC_GEMM_AVX512
enum { PAIRS_DP, PAIRS_EMU, PAIRS_EMF };

/* Which kernel computes a pair-order GEMM of M rows (path: gemm_pairs_path,
 * 1 or 2); all give the same bits (the emulation's kernels run on path 2
 * only when they passed their check too). vdpbf16ps wherever it is the faster
 * multiply-add (dpbf16_faster), else for M <= UK_MR (decode: bound by reading
 * the weights, which it reads at 2 bytes); otherwise the emulation: on
 * widened operands (emf) where the FMAs bound it (M <= 256, or K <= 1024:
 * six widened rows of x fit in L1; the shifts and masks of the emulation
 * on bf16 operands take the FMA ports' slots), on bf16 operands (emu) for
 * M > 256 and K > 1024, where its operands' bytes do. The
 * environment variable RC_PAIRS_ROUTE (dp, emu or emf) forces one kernel for
 * every M (dp only on path 2), for the tests. */
static int gemm_pairs_route(int path, int64_t M, int64_t K)
{
    static int forced = -2, dp_fast = -1;
    if (forced == -2) {
        const char *r = getenv("RC_PAIRS_ROUTE");
        forced = !r ? -1 : !strcmp(r, "dp") ? PAIRS_DP : !strcmp(r, "emu") ? PAIRS_EMU : !strcmp(r, "emf") ? PAIRS_EMF : -1;
    }
    if (path == 2 && !g_pairs_emu_ok)
        return PAIRS_DP;
    if (forced >= 0 && (forced != PAIRS_DP || path == 2))
        return forced;
    if (path == 2) {
        if (dp_fast < 0)
            dp_fast = dpbf16_faster();
        if (dp_fast || M <= UK_MR)
            return PAIRS_DP;
    }
    return M <= UK_MR || (M > 256 && K > 1024) ? PAIRS_EMU : PAIRS_EMF;
}
#endif

const char *rc_cpu_gemm_pairs_path(void)
{
    static const char *const names[] = {"plain C", "AVX-512 FMA emulation", "vdpbf16ps"};
    return names[gemm_pairs_path()];
}

const char *rc_cpu_gemm_pairs_kernel_mk(int64_t M, int64_t K)
{
#ifdef RC_GEMM_AVX512
    static const char *const names[] = {"vdpbf16ps", "FMA emulation on bf16 operands",
                                        "FMA emulation on widened operands"};
    if (gemm_pairs_path() > 0)
        return names[gemm_pairs_route(gemm_pairs_path(), M, K)];
#else
    (void)M, (void)K;
#endif
    return "plain C";
}

const char *rc_cpu_gemm_pairs_kernel(int64_t M)
{
    return rc_cpu_gemm_pairs_kernel_mk(M, 768);
}

int rc_cpu_dpbf16_rate(double *dp_ns, double *fma_ns)
{
#ifdef RC_GEMM_AVX512
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) {
        double tdp, tfma;
        dpbf16_rates(&tdp, &tfma);
        *dp_ns = tdp * 1e9 / (256.0 * 12.0);
        *fma_ns = tfma * 1e9 / (256.0 * 12.0);
        return 1;
    }
#endif
    *dp_ns = *fma_ns = 0.0;
    return 0;
}

int rc_cpu_dpbf16_raw(const uint16_t a[32], const uint16_t b[32], float acc[16])
{
#ifdef RC_GEMM_AVX512
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) {
        dpbf16_raw(a, b, acc);
        return 1;
    }
#else
    (void)a, (void)b, (void)acc;
#endif
    return 0;
}

static rc_status cpu_download(rc_backend *be, const float *src, int64_t n, float *host)
{
    (void)be;
    memcpy(host, src, (size_t)n * sizeof *host);
    return RC_OK;
}

static rc_status cpu_gather_rows(rc_backend *be, const float *src, int64_t row_len, const int64_t *rows,
                                 int64_t n, float *dst)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * row_len, src + rows[i] * row_len, (size_t)row_len * sizeof *dst);
    return RC_OK;
}

/* y[M, N] = R(x . W^T + bias) over K columns: row m of x at x + m * ldx, row
 * n of W at element n * ldw of W.p (ldx = ldw = K: a whole GEMM; a K-slice
 * passes its first column and the whole GEMM's K). The order over the K
 * columns is that of a GEMM of depth K, whatever the strides. */
static rc_status cpu_gemm(rc_backend *be, const float *x, int64_t ldx, int64_t M, int64_t K, rc_wt W, int64_t ldw,
                          int64_t N, const float *bias, rc_dtype in_dt, rc_dtype out_dt, float *y)
{
    if (M == 0 || N == 0)
        return RC_OK;
    if (W.dt != RC_F32 && W.dt != RC_BF16 && W.dt != RC_F16)
        return rc_errorf(RC_ERR_INTERNAL, "matmul: weights stored as %s", rc_dtype_name(W.dt));
#if RC_HAVE_BLAS
    if (be->kernels == RC_KERNELS_BLAS) {
        if (M > INT32_MAX || N > INT32_MAX || ldx > INT32_MAX || ldw > INT32_MAX)
            return rc_errorf(RC_ERR_UNSUPPORTED, "matmul of %lld x %lld x %lld exceeds BLAS int range",
                             (long long)M, (long long)N, (long long)K);
        float *wf = NULL; /* sgemm takes fp32: 2-byte weights widened (an engine gives BLAS fp32 weights; this
                           * is for direct calls) */
        if (W.dt != RC_F32) { /* the rows' K columns, packed */
            RC_TRY(rc_alloc_aligned((void **)&wf, N * K, sizeof *wf, "matmul weights"));
            for (int64_t n = 0; n < N; n++)
                rc_wt_convert(W, n * ldw, K, RC_F32, RC_F32, wf + n * K);
        }
        float beta = 0.0f;
        if (bias) { /* like torch.addmm: the bias is the C operand, added in fp32 */
            for (int64_t r = 0; r < M; r++)
                memcpy(y + r * N, bias, (size_t)N * sizeof *y);
            beta = 1.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)ldx,
                    wf ? wf : (const float *)W.p, (int)(wf ? K : ldw), beta, y, (int)N);
        free(wf);
        if (out_dt != RC_F32) {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < M * N; i++)
                y[i] = rc_round_to(y[i], out_dt);
        }
        return RC_OK;
    }
#else
    if (be->kernels == RC_KERNELS_BLAS) /* refused at creation */
        return rc_errorf(RC_ERR_INTERNAL, "matmul: %s", rc_blas_missing_msg);
#endif
    const rco_gemm_order C = rco_gemm_order_dt(be->kernels == RC_KERNELS_INVARIANT, M, K, in_dt);
#ifdef RC_GEMM_AVX512
    if (C.pairs && gemm_pairs_path() > 0) {
        const int route = gemm_pairs_route(gemm_pairs_path(), M, K);
        if (route == PAIRS_EMF)
            return gemm_pairs_emf(be, x, ldx, M, K, W, ldw, N, bias, out_dt, y, C);
        return gemm_pairs(route == PAIRS_DP ? 2 : 1, x, ldx, M, K, W, ldw, N, bias, out_dt, y, C);
    }
#endif
    const bool avx512 = gemm_use_avx512() && !C.pairs; /* the pair order without its SIMD paths: the twin */
    float *wrows = NULL; /* the portable kernel's widened weight row, one per thread */
    if (!avx512 && W.dt != RC_F32)
        RC_TRY(rc_alloc_aligned((void **)&wrows, (int64_t)omp_get_max_threads() * K, sizeof *wrows, "matmul rows"));
    float *panel = NULL; /* the AVX-512 kernel's weight panels (widened, or fp32 rows aligned), one per thread */
    const int64_t panel_n = GEMM_N_BLOCK * ((K + 15) / 16 * 16);
    const bool w_unaligned = W.dt == RC_F32 && (((uintptr_t)W.p | (uintptr_t)(ldw * 4)) & 63u) != 0;
    if (avx512 && (W.dt != RC_F32 || w_unaligned) && M > UK_MR)
        RC_TRY(cpu_scratch(be, (int64_t)omp_get_max_threads() * panel_n, &panel));
    const int64_t nb = (N + GEMM_N_BLOCK - 1) / GEMM_N_BLOCK, mb = (M + GEMM_M_BLOCK - 1) / GEMM_M_BLOCK;
#ifdef RC_GEMM_AVX512
    if (panel) { /* a column block of all rows per task: its weights widened or aligned once */
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t bn = 0; bn < nb; bn++) {
            const int64_t n0 = bn * GEMM_N_BLOCK, n1 = n0 + GEMM_N_BLOCK < N ? n0 + GEMM_N_BLOCK : N;
            gemm_cols_avx512_panel(W, ldw, x, ldx, M, K, bias, out_dt, y, N, n0, n1, C,
                                   panel + (int64_t)omp_get_thread_num() * panel_n);
        }
        return RC_OK;
    }
#endif
#pragma omp parallel for schedule(dynamic, 1) collapse(2)
    for (int64_t bm = 0; bm < mb; bm++)
        for (int64_t bn = 0; bn < nb; bn++) {
            int64_t n0 = bn * GEMM_N_BLOCK, n1 = n0 + GEMM_N_BLOCK < N ? n0 + GEMM_N_BLOCK : N;
            int64_t m0 = bm * GEMM_M_BLOCK, m1 = m0 + GEMM_M_BLOCK < M ? m0 + GEMM_M_BLOCK : M;
#ifdef RC_GEMM_AVX512
            if (avx512) {
                gemm_block_avx512_any(W, ldw, x, ldx, K, bias, out_dt, y, N, m0, m1, n0, n1, C);
                continue;
            }
#endif
            gemm_block_ref(x, ldx, K, W, ldw, bias, out_dt, y, N, m0, m1, n0, n1, C,
                           wrows ? wrows + (int64_t)omp_get_thread_num() * K : NULL);
        }
    free(wrows);
    return RC_OK;
}

static rc_status cpu_matmul(rc_backend *be, const float *x, int64_t M, int64_t K, rc_wt W, int64_t N,
                            const float *bias, rc_dtype in_dt, rc_dtype out_dt, float *y)
{
    return cpu_gemm(be, x, K, M, K, W, K, N, bias, in_dt, out_dt, y);
}

static rc_status cpu_matmul_kslice(rc_backend *be, const float *x, int64_t M, int64_t K, int64_t k0, int64_t Ks,
                                   rc_wt W, int64_t N, const float *bias, rc_dtype in_dt, rc_dtype out_dt, float *y)
{
    if (k0 < 0 || Ks < 1 || k0 > K - Ks)
        return rc_errorf(RC_ERR_INTERNAL, "matmul: K-slice [%lld, +%lld) outside K = %lld", (long long)k0,
                         (long long)Ks, (long long)K);
    const rc_wt Ws = {(const unsigned char *)W.p + k0 * rc_dtype_size(W.dt), W.dt, W.mapped};
    return cpu_gemm(be, x + k0, K, M, Ks, Ws, K, N, bias, in_dt, out_dt, y);
}

void rc_cpu_rope_apply(float *v, const float *c, const float *s, int64_t half, rc_dtype out_dt)
{
    for (int64_t j = 0; j < half; j++)
        rco_rope_pair(v + j, v + j + half, c[j], s[j], out_dt, out_dt);
}

static rc_status cpu_rope(rc_backend *be, float *qkv, const rc_batch_desc *bd, const rc_attn_params *ap)
{
    (void)be;
    RC_TRY(rc_attn_params_check(ap, "rope"));
    if (ap->qkv_st != RC_F32) /* host memory: every activation a float array */
        return rc_errorf(RC_ERR_INTERNAL, "rope: the CPU backend holds qkv as floats");
    const int64_t d = ap->head_dim, rd = ap->rotary_dim, half = rd / 2;
    const int64_t nheads_rot = ap->n_heads + ap->n_kv_heads; /* Q and K heads are adjacent */
    const int64_t row_len = (ap->n_heads + 2 * ap->n_kv_heads) * d;
    const float *inv_freq = ap->inv_freq;
    const rc_dtype cs_dt = ap->rope_cs_dt, mid_dt = ap->rope_mid_dt, out_dt = ap->rope_dt;
    if (ap->pos != RC_ATTN_POS_ROTARY || rd == 0)
        return RC_OK;
    const int64_t lo = bd->row_lo, hi = rc_bd_row_hi(bd); /* qkv holds rows [lo, hi) */
#pragma omp parallel for schedule(static)
    for (int64_t r = lo; r < hi; r++) {
        float c[2048], s[2048]; /* rd <= head_dim <= 4096 */
        const float p = (float)bd->pos[r];
        for (int64_t j = 0; j < half; j++)
            rco_rope_cs(p, inv_freq[j], ap->rope_attn_factor, cs_dt, &c[j], &s[j]);
        for (int64_t h = 0; h < nheads_rot; h++) {
            float *v = qkv + (r - lo) * row_len + h * d;
            for (int64_t j = 0; j < half; j++)
                rco_rope_pair(v + j, v + j + half, c[j], s[j], mid_dt, out_dt);
            for (int64_t t = rd; t < d; t++) /* the dims that pass: the same dtype as the rotated ones (a q/k
                                              * norm kept fp32 by --upcast norm leaves fp32 values there) */
                v[t] = rc_round_to(v[t], out_dt);
        }
    }
    return RC_OK;
}

float rc_cpu_score(const float *q, const float *k, int64_t d, int lanes, float scale, rc_dtype score_dt)
{
    const rco_score_spec sp = {.scale = scale, .score_dt = score_dt, .alibi = RCO_ALIBI_NONE};
    return rco_score(q, k, d, lanes, &sp, 0);
}

float rc_cpu_score_spec(const float *q, const float *k, int64_t d, int lanes, const rco_score_spec *sp, int64_t j)
{
    return rco_score(q, k, d, lanes, sp, j);
}

void rc_cpu_softmax(float *sc, int64_t n, int mode, rc_dtype prob_dt)
{
    float ms[RC_SOFTMAX_MAX_CHUNKS], ls[RC_SOFTMAX_MAX_CHUNKS];
    rco_softmax(sc, n, mode, prob_dt, ms, ls);
}

void rc_cpu_pv(const float *p, const float *V, int64_t nk, int64_t d, int64_t tile, rc_dtype out_dt,
               float *acc, float *out)
{
    float part[4096];
    rco_pv(p, V, nk, d, tile, out_dt, acc, part, out);
}

/* Store rows of K or V values (exact values of dt) into a 2-byte cache */
#ifdef RC_GEMM_AVX512
/* kv_store16's leading elements, 16 at a time, while every one of a group is
 * a bf16 value and not a NaN (its low 16 bits zero): rc_f32_to_bf16 of such
 * a value is its high half, which is stored; returns how many were stored */
AVX512_FN static int64_t kv_store_bf16_avx512(uint16_t *dst, const float *src, int64_t n)
{
    const __m512i lo16 = _mm512_set1_epi32(0xffff), abs = _mm512_set1_epi32(0x7fffffff),
                  inf = _mm512_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i u = _mm512_loadu_si512((const void *)(src + i));
        if (_mm512_test_epi32_mask(u, lo16) || _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf))
            break;
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
    }
    return i;
}
#endif

static bool kv_store16(uint16_t *dst, const float *src, int64_t n, rc_dtype dt)
{
    bool exact = true;
    int64_t i0 = 0;
#ifdef RC_GEMM_AVX512
    if (dt == RC_BF16 && gemm_use_avx512())
        i0 = kv_store_bf16_avx512(dst, src, n);
#endif
    for (int64_t i = i0; i < n; i++) {
        const uint16_t h = dt == RC_BF16 ? rc_f32_to_bf16(src[i]) : rc_f32_to_f16(src[i]);
        exact &= (dt == RC_BF16 ? rc_bf16_to_f32(h) : rc_f16_to_f32(h)) == src[i] || src[i] != src[i];
        dst[i] = h;
    }
    return exact;
}

/* One head's new key or value row as the cache stores it (kv->quant:
 * rco_kv_value), into a 2-byte (dst16) or fp32 (dst32) cache; false when a
 * value is not exact in a 2-byte cache. tmp: n floats. */
static bool kv_store_row(const rc_kv_cache *kv, const float *src, int64_t n, float scale, float *tmp,
                         uint16_t *dst16, float *dst32)
{
    if (kv->quant != RC_KV_AUTO) {
        for (int64_t i = 0; i < n; i++)
            tmp[i] = rco_kv_value(src[i], kv->quant, scale, kv->deq_dt);
        src = tmp;
    }
    if (dst16)
        return kv_store16(dst16, src, n, kv->dt);
    memcpy(dst32, src, (size_t)n * sizeof *dst32);
    return true;
}


#define ATTN_ROW_BLOCK 32 /* rows of one sequence per work item (keys widened once per item) */

static rc_status cpu_attention(rc_backend *be, const float *qkv, const rc_batch_desc *bd,
                               const rc_attn_params *ap, rc_kv_cache *kv, int64_t layer, float *out)
{
    RC_TRY(rc_attn_params_check(ap, "attention"));
    if (ap->qkv_st != RC_F32 || ap->out_st != RC_F32) /* host memory: every activation a float array */
        return rc_errorf(RC_ERR_INTERNAL, "attention: the CPU backend holds qkv and out as floats");
    const rc_attn_numerics *an = &ap->num;
    const int64_t d = ap->head_dim, nh = ap->n_heads, nkv = ap->n_kv_heads;
    const int64_t group = nh / nkv;
    const int64_t row_len = (nh + 2 * nkv) * d;
    const int64_t T = kv->max_len;
    const int64_t slot_stride = nkv * T * d;
    const int64_t layer0 = layer * kv->n_slots * slot_stride;
    const bool half = kv->dt != RC_F32;
    if (half ? !(kv->k16 && kv->v16 && (kv->dt == RC_BF16 || kv->dt == RC_F16)) : !(kv->k && kv->v))
        return rc_errorf(RC_ERR_INTERNAL, "attention: KV cache storage does not match its dtype");
    const bool invariant = be->kernels == RC_KERNELS_INVARIANT;
    const int64_t lo = bd->row_lo, hi = rc_bd_row_hi(bd); /* qkv and out hold rows [lo, hi) */
    if (lo < 0 || hi > bd->n_rows || lo > hi)
        return rc_errorf(RC_ERR_INTERNAL, "attention: rows [%lld, %lld) of %lld", (long long)lo, (long long)hi,
                         (long long)bd->n_rows);
    if (kv->quant != RC_KV_AUTO &&
        ((kv->quant != RC_KV_FP8_E4M3 && kv->quant != RC_KV_FP8_E5M2) || !(kv->k_scale > 0.0f) ||
         !(kv->v_scale > 0.0f)))
        return rc_errorf(RC_ERR_INTERNAL, "attention: KV cache quantisation %d with scales %g, %g", (int)kv->quant,
                         (double)kv->k_scale, (double)kv->v_scale);
    /* store the new keys and values (as the cache keeps them: kv_store_row) */
    bool exact = true;
    float *qtmp = NULL; /* an fp8 cache's row of quantised values */
    if (kv->quant != RC_KV_AUTO)
        RC_TRY(cpu_scratch(be, d, &qtmp));
    for (int64_t b = 0; b < bd->n_seq; b++)
        for (int64_t i = 0; i < bd->n_new[b]; i++) {
            if (bd->row0[b] + i < lo || bd->row0[b] + i >= hi)
                continue;
            const float *row = qkv + (bd->row0[b] + i - lo) * row_len;
            int64_t p = bd->start[b] + i;
            for (int64_t h = 0; h < nkv; h++) {
                int64_t off = layer0 + bd->slot[b] * slot_stride + h * T * d + p * d;
                exact &= kv_store_row(kv, row + (nh + h) * d, d, kv->k_scale, qtmp, half ? kv->k16 + off : NULL,
                                      half ? NULL : kv->k + off);
                exact &= kv_store_row(kv, row + (nh + nkv + h) * d, d, kv->v_scale, qtmp,
                                      half ? kv->v16 + off : NULL, half ? NULL : kv->v + off);
            }
        }
    if (!exact)
        return rc_errorf(RC_ERR_INTERNAL, "attention: a key or value is not a %s value (the cache would round it)",
                         rc_dtype_name(kv->dt));
    /* a sequence's rows in [lo, hi): its rows i in [first(b), last(b)) */
#define SEQ_I0(b) (lo - bd->row0[b] > 0 ? lo - bd->row0[b] : 0)
#define SEQ_I1(b) (hi - bd->row0[b] < bd->n_new[b] ? hi - bd->row0[b] : bd->n_new[b])
    int64_t max_keys = 0, n_items = 0;
    for (int64_t b = 0; b < bd->n_seq; b++) {
        if (bd->start[b] + bd->n_new[b] > max_keys) /* the whole call's: P.V's split depends on it */
            max_keys = bd->start[b] + bd->n_new[b];
        if (SEQ_I1(b) > SEQ_I0(b))
            n_items += (SEQ_I1(b) - SEQ_I0(b) + ATTN_ROW_BLOCK - 1) / ATTN_ROW_BLOCK;
    }
    /* work items: (sequence, block of its rows) x KV head */
    /* per thread: scores, chunk statistics (2 x RC_SOFTMAX_MAX_CHUNKS), acc and
     * part, and with a 2-byte cache the widened keys and values */
    const int64_t per_thread = max_keys + 2 * RC_SOFTMAX_MAX_CHUNKS + 2 * d + (half ? 2 * max_keys * d : 0);
    const int64_t n_threads = omp_get_max_threads();
    float *scratch;
    /* the items' (sequence, first row, end row) first (int64: 2 floats each), then the threads' room */
    RC_TRY(cpu_scratch(be, 6 * n_items + n_threads * per_thread, &scratch));
    int64_t *item_seq = (int64_t *)scratch;
    scratch += 6 * n_items;
    {
        int64_t k = 0;
        for (int64_t b = 0; b < bd->n_seq; b++)
            for (int64_t i = SEQ_I0(b); i < SEQ_I1(b); i += ATTN_ROW_BLOCK) {
                item_seq[3 * k] = b;
                item_seq[3 * k + 1] = i;
                item_seq[3 * k + 2] = SEQ_I1(b) - i < ATTN_ROW_BLOCK ? SEQ_I1(b) : i + ATTN_ROW_BLOCK;
                k++;
            }
    }
#undef SEQ_I0
#undef SEQ_I1
    const int64_t work = n_items * nkv;
    const bool avx512 = gemm_use_avx512();
    (void)avx512;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t wi = 0; wi < work; wi++) {
        const int64_t it = wi / nkv, kvh = wi % nkv;
        const int64_t b = item_seq[3 * it], i0 = item_seq[3 * it + 1], i1 = item_seq[3 * it + 2];
        float *sc = scratch + (size_t)omp_get_thread_num() * (size_t)per_thread;
        float *ms = sc + max_keys, *ls = ms + RC_SOFTMAX_MAX_CHUNKS, *acc = ls + RC_SOFTMAX_MAX_CHUNKS;
        const int64_t base = layer0 + bd->slot[b] * slot_stride + kvh * T * d;
        const int64_t lo0 = rco_attn_lo(bd->start[b] + i0, ap->sliding_window);
        const int64_t end = bd->start[b] + i1; /* keys [lo0, end) cover every row of the item */
#ifdef RC_GEMM_AVX512
        if (half && avx512 && i1 - i0 == 1) { /* one query row (decode): the 2-byte keys and values read in place,
                                               * each read once, widened in registers (the same values) */
            const uint16_t *K16 = kv->k16 + base, *V16 = kv->v16 + base;
            const int64_t r = bd->row0[b] + i0, p = bd->pos[r];
            const int64_t klo = rco_attn_lo(p, ap->sliding_window);
            for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
                const rco_score_spec sp =
                    rc_attn_score_spec(ap, ap->alibi_slopes, h, p, klo, bd->start[b] + bd->n_new[b] - 1);
                (kv->dt == RC_BF16 ? attn_row_avx512_bf16 : attn_row_avx512_f16)(
                    qkv + (r - lo) * row_len + h * d, K16 + klo * d, V16 + klo * d, p - klo + 1, d, &sp,
                    rco_attn_mode(invariant, bd->n_new[b]), max_keys, an->prob_dt, an->out_dt, sc, ms, ls, acc,
                    acc + d, out + (r - lo) * nh * d + h * d);
            }
            continue;
        }
#endif
        const float *K0, *V0; /* key lo0's row */
        if (half) {
            float *kw = acc + 2 * d, *vw = kw + max_keys * d;
            widen16(kw, kv->k16 + base + lo0 * d, (end - lo0) * d, kv->dt);
            widen16(vw, kv->v16 + base + lo0 * d, (end - lo0) * d, kv->dt);
            K0 = kw;
            V0 = vw;
        } else {
            K0 = kv->k + base + lo0 * d;
            V0 = kv->v + base + lo0 * d;
        }
        for (int64_t i = i0; i < i1; i++) {
            const int64_t r = bd->row0[b] + i, p = bd->pos[r];
            const int64_t klo = rco_attn_lo(p, ap->sliding_window);
            for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
                const rco_score_spec sp =
                    rc_attn_score_spec(ap, ap->alibi_slopes, h, p, klo, bd->start[b] + bd->n_new[b] - 1);
#ifdef RC_GEMM_AVX512
                if (avx512) {
                    attn_row_avx512(qkv + (r - lo) * row_len + h * d, K0 + (klo - lo0) * d, V0 + (klo - lo0) * d,
                                    p - klo + 1, d, &sp, rco_attn_mode(invariant, bd->n_new[b]), max_keys,
                                    an->prob_dt, an->out_dt, sc, ms, ls, acc, acc + d,
                                    out + (r - lo) * nh * d + h * d);
                    continue;
                }
#endif
                rco_attn_row(qkv + (r - lo) * row_len + h * d, K0 + (klo - lo0) * d, V0 + (klo - lo0) * d, p - klo + 1,
                             d, &sp, rco_attn_mode(invariant, bd->n_new[b]), max_keys, an->prob_dt, an->out_dt, sc, ms,
                             ls, acc, acc + d, out + (r - lo) * nh * d + h * d);
            }
        }
    }
    return RC_OK;
}

static rc_status cpu_clamp(rc_backend *be, float *x, int64_t n, float c)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        x[i] = rco_clamp1(x[i], c);
    return RC_OK;
}

static rc_status cpu_scale(rc_backend *be, float *x, int64_t n, float sc, rc_dtype out_dt)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        x[i] = rco_scale1(x[i], sc, out_dt);
    return RC_OK;
}

static rc_status cpu_softcap(rc_backend *be, float *x, int64_t n, float cap, rc_dtype out_dt)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        x[i] = rco_softcap1(x[i], cap, out_dt);
    return RC_OK;
}

static rc_status cpu_normalize_rows(rc_backend *be, rc_wt W, int64_t M, int64_t H, float eps, rc_dtype out_dt,
                                    float *out)
{
    (void)be;
    if (W.dt == RC_F32) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < M; r++)
            rco_normalize_row((const float *)W.p + r * H, H, eps, out_dt, out + r * H);
        return RC_OK;
    }
    for (int64_t r = 0; r < M; r++) { /* widened into the output row, normalised in place */
        rc_wt_convert(W, r * H, H, RC_F32, RC_F32, out + r * H);
        rco_normalize_row(out + r * H, H, eps, out_dt, out + r * H);
    }
    return RC_OK;
}

/* An activation rounded to bf16 of a bf16 input has 65536 possible inputs:
 * its values for all of them, computed once per backend by rco_act_dt itself
 * (the same function on the same input: the same bits), so a bf16 run's GELU /
 * SiLU is a lookup (erff was 11% of the default check). NULL when the table
 * cannot be allocated (the caller computes). Built outside parallel regions. */
static const float *act_table(rc_backend *be, rc_act act)
{
    cpu_backend *c = (cpu_backend *)be;
    if ((int)act < 0 || (int)act >= RC_ACT_KINDS)
        return NULL;
    if (!c->act_lut[act]) {
        float *t = malloc(65536 * sizeof *t);
        if (!t)
            return NULL;
#pragma omp parallel for schedule(static)
        for (int32_t u = 0; u < 65536; u++)
            t[u] = rco_act_dt(act, rc_bits_f32((uint32_t)u << 16), RC_BF16);
        c->act_lut[act] = t;
    }
    return c->act_lut[act];
}

/* rco_act_dt(act, x, dt), from the table when dt is bf16 and x a bf16 value */
static inline float act_lookup(const float *lut, rc_act act, float x, rc_dtype dt)
{
    const uint32_t u = rc_f32_bits(x);
    return lut && (u & 0xffffu) == 0 ? lut[u >> 16] : rco_act_dt(act, x, dt);
}

static rc_status cpu_act(rc_backend *be, rc_act act, float *x, int64_t n, rc_dtype out_dt)
{
    const float *lut = out_dt == RC_BF16 && n >= 65536 ? act_table(be, act) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        x[i] = act_lookup(lut, act, x[i], out_dt);
    return RC_OK;
}

static rc_status cpu_act_mul(rc_backend *be, rc_act act, float *gate, const float *up, int64_t n,
                             rc_dtype act_dt, rc_dtype out_dt)
{
    const float *lut = act_dt == RC_BF16 && n >= 65536 ? act_table(be, act) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        gate[i] = rc_round_to(act_lookup(lut, act, gate[i], act_dt) * up[i], out_dt);
    return RC_OK;
}

static rc_status cpu_add(rc_backend *be, const float *a, const float *b, int64_t n, rc_dtype out_dt,
                         float *out)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        out[i] = rc_round_to(a[i] + b[i], out_dt);
    return RC_OK;
}

static rc_status cpu_logprobs(rc_backend *be, const float *logits, int64_t M, int64_t V,
                              float temperature, rc_dtype lp_dt, float *full_out,
                              const int32_t *targets, float *target_out)
{
    (void)be;
#ifdef RC_GEMM_AVX512
    if (lp_dt == RC_F32 && gemm_use_avx512()) { /* rco_logprob_row's fp32 path, its exps 8 at a time */
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < M; r++) {
            const float *x = logits + r * V;
            const float mx = rco_lp_max(x, V, temperature, RC_F32);
            rco_logprob_finish_f32(x, V, temperature, mx, lse_sum_avx512(x, V, temperature, mx),
                                   full_out ? full_out + r * V : NULL, targets && target_out ? targets[r] : -1,
                                   target_out ? target_out + r : NULL);
        }
        return RC_OK;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < M; r++)
        rco_logprob_row(logits + r * V, V, temperature, lp_dt, full_out ? full_out + r * V : NULL,
                        targets && target_out ? targets[r] : -1, target_out ? target_out + r : NULL);
    return RC_OK;
}

void rc_exp64_floats(const float *x, int64_t n, double *out)
{
#ifdef RC_GEMM_AVX512
    if (gemm_use_avx512()) {
        exp64_floats_avx512(x, n, out);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        out[i] = rco_exp64((double)x[i]);
}

static const rc_backend_ops k_cpu_ops = {
    .name = "cpu",
    .host_memory = true,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .gather_rows = cpu_gather_rows,
    .embed = cpu_embed,
    .norm = cpu_norm,
    .matmul = cpu_matmul,
    .matmul_kslice = cpu_matmul_kslice,
    .rope = cpu_rope,
    .qk_norm = cpu_qk_norm,
    .attention = cpu_attention,
    .clamp = cpu_clamp,
    .scale = cpu_scale,
    .softcap = cpu_softcap,
    .normalize_rows = cpu_normalize_rows,
    .act = cpu_act,
    .act_mul = cpu_act_mul,
    .add = cpu_add,
    .logprobs = cpu_logprobs,
    .zero = rc_cpu_zero, /* the MoE ops: moe.c */
    .moe_route = rc_cpu_moe_route,
    .moe_accumulate = rc_cpu_moe_accumulate,
    .moe_route_grouped = rc_cpu_moe_route_grouped,
    .gdn_step = rc_cpu_gdn_step, /* gdn.c */
    .bias_add = rc_cpu_bias_add,
    .swiglu_clamp = rc_cpu_swiglu_clamp,
    .gdn_mixer = rc_cpu_gdn_mixer, /* gdn.c */
    .gate_mul = rc_cpu_gate_mul,
};

static void cpu_destroy(rc_backend *be)
{
    if (!be)
        return;
    free(((cpu_backend *)be)->scratch);
    for (int a = 0; a < RC_ACT_KINDS; a++)
        free(((cpu_backend *)be)->act_lut[a]);
    free(be);
}

bool rc_have_blas(void)
{
    return RC_HAVE_BLAS != 0;
}

rc_status rc_backend_cpu_create(int n_threads, rc_kernels kernels, rc_backend **out)
{
    if (kernels == RC_KERNELS_BLAS && !rc_have_blas())
        return rc_errorf(RC_ERR_UNSUPPORTED, "--kernels blas: %s", rc_blas_missing_msg);
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    rc_backend *be = &cb->base;
    if (n_threads <= 0)
        n_threads = omp_get_num_procs();
    omp_set_num_threads(n_threads);
    /* OpenBLAS single-threaded: its pthreads spin against OpenMP's workers
     * on the same cores (the bundled check's blas run took 4.5 s with them,
     * 2.9 s without; decode steps were 5x slower; with threads only for
     * GEMMs of 64 rows or more, 3.1 s). Threads split OpenBLAS's blocks,
     * never an output's K order: the results are the same (checked on the
     * bundled check and four fixtures). Splitting the columns over OpenMP
     * instead is faster (2.1 s) but changes results: narrower calls take
     * OpenBLAS's small-matrix kernels, whose order differs. */
#if RC_HAVE_BLAS
    openblas_set_num_threads(1);
#endif
    be->ops = &k_cpu_ops;
    be->n_threads = n_threads;
    be->kernels = kernels;
    *out = be;
    return RC_OK;
}

void rc_backend_destroy(rc_backend *be)
{
    if (be)
        be->ops->destroy(be);
}
