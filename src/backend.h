/* The backend interface: every numeric op the forward pass needs. forward.c
 * is written once against it; backend_cpu.c is the reference implementation
 * (and the CPU twin of every CUDA kernel in kernels/).
 *
 * All tensor pointers are in the backend's memory; row-major; activations are
 * float32 storage. Shapes are given as int64_t. */
#ifndef RC_BACKEND_H
#define RC_BACKEND_H

#include <stdint.h>

#include "model.h"
#include "status.h"

/* Description of the sequences in one forward call (host memory). Tokens of
 * all sequences are packed: sequence b owns rows [row0[b], row0[b] + n_new[b]). */
typedef struct {
    int64_t n_seq;
    const int64_t *slot;  /* [n_seq] KV-cache slot */
    const int64_t *start; /* [n_seq] position of the first new token */
    const int64_t *n_new; /* [n_seq] new tokens (>= 1) */
    const int64_t *row0;  /* [n_seq] first packed row */
    int64_t n_rows;       /* sum of n_new */
    const int64_t *pos;   /* [n_rows] absolute position of each row */
} rc_batch_desc;

/* KV cache: for each layer, K and V of [n_slots, n_kv_heads, max_len, head_dim]. */
typedef struct {
    int64_t n_layers, n_slots, n_kv_heads, max_len, head_dim;
    float *k; /* [n_layers][n_slots][n_kv_heads][max_len][head_dim] */
    float *v; /* same */
} rc_kv_cache;

typedef struct rc_backend rc_backend;

typedef struct {
    const char *name;
    void (*destroy)(rc_backend *be);
    rc_status (*alloc)(rc_backend *be, int64_t n_floats, float **out);
    void (*free)(rc_backend *be, float *p);
    /* out[r, :] = table[tokens[r], :], r < n */
    rc_status (*embed)(rc_backend *be, const int32_t *tokens, int64_t n, const float *table,
                       int64_t hidden, float *out);
    /* out = norm(x) * w (+ b); LayerNorm when b_or_null is set or kind says so */
    rc_status (*norm)(rc_backend *be, rc_norm_kind kind, const float *x, int64_t M, int64_t H,
                      const float *w, const float *b, double eps, float *out);
    /* y[M, N] = x[M, K] . W[N, K]^T (+ bias[N]) */
    rc_status (*matmul)(rc_backend *be, const float *x, int64_t M, int64_t K, const float *W,
                        int64_t N, const float *bias, float *y);
    /* RoPE in place on the Q and K parts of packed qkv rows
     * [n_rows, (nh + 2 nkv) * d], first rotary_dim dims of each head. */
    rc_status (*rope)(rc_backend *be, float *qkv, const rc_batch_desc *bd, const rc_config *cfg,
                      const float *inv_freq);
    /* Append K, V of the new rows to the cache and compute causal attention of
     * every new row over its sequence's cache. out: [n_rows, nh * d]. */
    rc_status (*attention)(rc_backend *be, const float *qkv, const rc_batch_desc *bd,
                           const rc_config *cfg, rc_kv_cache *kv, int64_t layer, float *out);
    /* x = act(x) for n elements */
    rc_status (*act)(rc_backend *be, rc_act act, float *x, int64_t n);
    /* gate = act(gate) * up, n elements */
    rc_status (*act_mul)(rc_backend *be, rc_act act, float *gate, const float *up, int64_t n);
    /* out = a + b, n elements (out may alias a) */
    rc_status (*add)(rc_backend *be, const float *a, const float *b, int64_t n, float *out);
    /* Next-token log-probs from logits [M, V] (fp32, fp64 log-sum-exp):
     * full_out (host, [M, V]) if non-NULL; target_out[r] = logprob of
     * targets[r] (host) if both non-NULL. */
    rc_status (*logprobs)(rc_backend *be, const float *logits, int64_t M, int64_t V,
                          float *full_out, const int32_t *targets, float *target_out);
} rc_backend_ops;

struct rc_backend {
    const rc_backend_ops *ops;
    int n_threads;
};

/* How the CPU backend computes GEMMs:
 *  RC_GEMM_FIXED: our own kernel; each output element is one dot product in a
 *                 fixed order that depends only on K (batch-invariant: a row's
 *                 result does not depend on how many rows are computed with it);
 *  RC_GEMM_BLAS:  OpenBLAS cblas_sgemm, whose summation order changes with M
 *                 (see ../shared/reference/blas-batch-variance.md). */
typedef enum { RC_GEMM_FIXED, RC_GEMM_BLAS } rc_gemm_mode;

/* CPU backend (backend_cpu.c). n_threads <= 0: all cores. */
rc_status rc_backend_cpu_create(int n_threads, rc_gemm_mode gemm, rc_backend **out);
void rc_backend_destroy(rc_backend *be);

#endif
