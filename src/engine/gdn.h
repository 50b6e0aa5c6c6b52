/* The Gated DeltaNet ops (the linear-attention layers of Qwen3-Next and
 * Qwen3.5), computed as transformers computes them
 * (models/qwen3_next/modeling_qwen3_next.py, transformers 5.24;
 * docs/numerics.md "Gated DeltaNet"): the gates, the causal depthwise conv
 * with its conv state, l2norm, the gated delta rule in its recurrent form
 * (decode: the state updated token by token) and its chunked form (the full
 * forward: chunks of `chunk` tokens, the length padded to a multiple of the
 * chunk as transformers pads it), and the gated RMSNorm.
 *
 * Batch 1, row-major, fp32 arrays holding values of the dtype dt (the
 * engine's convention): q, k [T][hk][dk]; v [T][hv][dv]; a, b, g, beta
 * [T][hv]; the recurrent state [hv][dk][dv]; outputs [T][hv][dv]. Value
 * head h reads key head h / (hv / hk) (repeat_interleave). The per-output
 * arithmetic is in ops_inline.h (rco_gdn_*, rco_tsum_*). */
#ifndef RC_GDN_H
#define RC_GDN_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "status.h"

typedef struct rc_backend rc_backend;

#ifdef __cplusplus
extern "C" {
#endif

/* transformers' chunk size (torch_chunk_gated_delta_rule's chunk_size, and
 * FLA's kernels') */
#define RC_GDN_CHUNK_DEFAULT 64

typedef struct {
    int64_t hk, hv; /* key (and query) heads, value heads: a multiple of hk */
    int64_t dk, dv; /* head dims */
} rc_gdn_dims;

/* RC_OK when the dims are usable (positive, hv a multiple of hk, sizes that
 * fit), else RC_ERR_UNSUPPORTED naming the problem */
rc_status rc_gdn_dims_check(const rc_gdn_dims *d);

/* g and beta of T tokens from the projections a, b [T][hv] and the layer's
 * A_log, dt_bias [hv] (values of dt): g fp32, beta a value of dt. */
void rc_gdn_gates(const float *a, const float *b, int64_t T, int64_t hv, const float *A_log, const float *dt_bias,
                  rc_dtype dt, float *g, float *beta);

/* l2norm of n rows of d fp32 values (out may be x). */
rc_status rc_gdn_l2norm(const float *x, int64_t n, int64_t d, float *out);

/* Qwen3NextRMSNormGated over n rows of d values: x, z [n][d], w [d]. */
rc_status rc_gdn_gated_rmsnorm(const float *x, const float *z, int64_t n, int64_t d, const float *w, float eps,
                               rc_dtype dt, float *out);

/* The causal depthwise conv + SiLU over a sequence: x [T][C], w [C][K],
 * out [T][C]. causal_conv1d_fn over the inputs with K - 1 zeros before
 * them (state NULL: the full forward), or over the state's columns then the
 * inputs (state [C][K]: the conv state of a cache, the last K inputs before
 * the call, zeros for a new sequence, as DynamicCache.update_conv_state
 * pads; updated to the last K inputs after the call). */
rc_status rc_gdn_conv(const float *x, int64_t T, int64_t C, const float *w, int64_t K, rc_dtype dt, float *out,
                      float *state);

/* One decode step of the conv (causal_conv1d_update): x [C] the token's
 * inputs, state [C][K] the last K inputs (updated: shifted by one, x last),
 * out [C]. */
void rc_gdn_conv_step(const float *x, int64_t C, const float *w, int64_t K, rc_dtype dt, float *state, float *out);

/* The gated delta rule, recurrent form (torch_recurrent_gated_delta_rule,
 * use_qk_l2norm_in_kernel): T tokens from the state `state` [hv][dk][dv]
 * (values of state_dt), which is updated in fp32 and, at the end of the
 * call, rounded to state_dt (RC_F32: kept in fp32; the dtype: a cache that
 * stores the state in the dtype, rounding it after every call). out
 * [T][hv][dv], values of out_dt. */
rc_status rc_gdn_recurrent(const rc_gdn_dims *d, const float *q, const float *k, const float *v, const float *g,
                           const float *beta, int64_t T, rc_dtype out_dt, rc_dtype state_dt, float *state,
                           float *out);

/* The gated delta rule, chunked form (torch_chunk_gated_delta_rule,
 * use_qk_l2norm_in_kernel) with chunks of `chunk` tokens: init NULL (zeros)
 * or [hv][dk][dv] fp32 the initial state; final_state NULL or [hv][dk][dv]
 * the state after the last (padded) chunk, fp32. */
rc_status rc_gdn_chunked(const rc_gdn_dims *d, const float *q, const float *k, const float *v, const float *g,
                         const float *beta, int64_t T, int64_t chunk, rc_dtype out_dt, const float *init,
                         float *final_state, float *out);

/* One decode step of the recurrent form for n sequences, one token each
 * (the backend op gdn_step; the CUDA twin: kernels/gdn.cu): q, k [n][hk][dk]
 * raw (l2norm and scaling inside), v [n][hv][dv], g, beta [n][hv], state
 * [n][hv][dk][dv] (updated, rounded to state_dt), out [n][hv][dv]. */
rc_status rc_cpu_gdn_step(rc_backend *be, const rc_gdn_dims *d, const float *q, const float *k, const float *v,
                          const float *g, const float *beta, int64_t n, rc_dtype out_dt, rc_dtype state_dt,
                          float *state, float *out);
/* f32(sqrt(dk)) as Python's dk ** 0.5 gives it; the floats of scratch one
 * (sequence, head) of a step needs (rco_gdn_recurrent_token) */
float rc_gdn_qdiv(int64_t dk);
int64_t rc_gdn_step_scratch(const rc_gdn_dims *d);

/* Qwen3-Next's fused projections to separate tensors
 * (Qwen3NextGatedDeltaNet.fix_query_key_value_ordering): qkvz [T][hk][2 dk
 * + 2 rep dv] (per key head: q, k, its rep value heads' v, their z), ba
 * [T][hk][2 rep] (b, then a), rep = hv / hk, into mixed [T][C] (the conv's
 * channels: every q head, every k head, every v head; C = 2 hk dk + hv dv),
 * z [T][hv][dv], b, a [T][hv]. */
void rc_gdn_split_qkvz(const rc_gdn_dims *d, const float *qkvz, const float *ba, int64_t T, float *mixed, float *z,
                       float *b, float *a);

/* The mixer of a Gated DeltaNet layer between its projections, the full
 * forward (Qwen3NextGatedDeltaNet.forward without a cache, from
 * in_proj_qkvz / in_proj_ba's outputs to out_proj's input): the split, the
 * conv + SiLU (conv_w [C][K]), the gates (A_log, dt_bias [hv]), the chunked
 * rule (chunks of `chunk`), the gated RMSNorm (norm_w [dv], eps). out
 * [T][hv * dv], values of dt. */
rc_status rc_gdn_mixer(const rc_gdn_dims *d, const float *qkvz, const float *ba, int64_t T, const float *conv_w,
                       int64_t K, const float *A_log, const float *dt_bias, const float *norm_w, float eps,
                       int64_t chunk, rc_dtype dt, float *out);

/* The same mixer with a cache, as transformers runs it with one
 * (DynamicCache): fresh (a new sequence: the states are zeroed first; the
 * chunked form from zeros, whatever T) or not: T == 1 takes the decode step
 * (causal_conv1d_update, the recurrent form), T > 1 the conv over the
 * cached columns and the chunked form from the cached state. conv_state
 * [C][K], state [hv][dk][dv] updated; the state rounded to state_dt at the
 * end of the call. */
rc_status rc_gdn_mixer_cached(const rc_gdn_dims *d, const float *qkvz, const float *ba, int64_t T, const float *conv_w,
                              int64_t K, const float *A_log, const float *dt_bias, const float *norm_w, float eps,
                              int64_t chunk, rc_dtype dt, rc_dtype state_dt, bool fresh, float *conv_state,
                              float *state, float *out);

/* Which form a cached call runs: HF, as rc_gdn_mixer_cached (one cached
 * token: the conv step and the recurrent step; else the conv over the cached
 * columns and the chunked form); EXTEND, the chunked form whatever T (an
 * engine's extend of a prefix-cache hit: SGLang runs the rest of a prompt
 * after a restored state through chunk_gated_delta_rule, one token
 * included); RECURRENT, the conv over the cached columns and the recurrent
 * form whatever T (the invariant kernels: one algorithm however a sequence
 * is cut into calls). */
typedef enum { RC_GDN_FORM_HF, RC_GDN_FORM_EXTEND, RC_GDN_FORM_RECURRENT } rc_gdn_form;
rc_status rc_gdn_mixer_form(const rc_gdn_dims *d, const float *qkvz, const float *ba, int64_t T, const float *conv_w,
                            int64_t K, const float *A_log, const float *dt_bias, const float *norm_w, float eps,
                            int64_t chunk, rc_dtype dt, rc_dtype state_dt, bool fresh, rc_gdn_form form,
                            float *conv_state, float *state, float *out);

/* The mixer of one sequence's call as a backend op (gdn_mixer): the
 * arguments of rc_gdn_mixer_form, every array in the backend's memory.
 * rc_cpu_gdn_mixer runs it on host arrays (rc_gdn_mixer_form is it); the
 * CUDA twin (kernels/gdn.cu) runs the same per-thread functions
 * (ops_inline.h rco_gdn_mix_*) one thread per channel, (token, head) and
 * value head. */
typedef struct {
    rc_gdn_dims d;
    const float *qkvz, *ba;
    int64_t T;
    const float *conv_w;
    int64_t K;
    const float *A_log, *dt_bias, *norm_w;
    float eps;
    int64_t chunk;
    rc_dtype dt, state_dt;
    bool fresh;
    rc_gdn_form form;
    float *conv_state, *state, *out;
} rc_gdn_mixer_args;
rc_status rc_cpu_gdn_mixer(rc_backend *be, const rc_gdn_mixer_args *m);
/* the threads' view of a call (ops_inline.h), checked: RC_ERR_* naming the problem */
struct rco_gdn_mix;
rc_status rc_gdn_mix_prepare(const rc_gdn_mixer_args *m, struct rco_gdn_mix *a);
/* f32(dk ** -0.5), the chunked form's query scale */
float rc_gdn_qmul(int64_t dk);

/* x[i] = R_out(x[i] * R_gate(sigmoid(gate[i]))) (the backend op gate_mul:
 * Qwen3-Next's attention output gate, rco_gate_sigmoid_mul) */
rc_status rc_cpu_gate_mul(rc_backend *be, float *x, const float *gate, int64_t n, rc_dtype gate_dt, rc_dtype out_dt);

/* The exact reference: the recurrent form in double (l2norm, scaling and
 * state in double; exp, log1p from the C library in double). q, k, v, g,
 * beta as above (g, beta already computed), state [hv][dk][dv] in/out. */
rc_status rc_gdn_recurrent64(const rc_gdn_dims *d, const float *q, const float *k, const float *v, const float *g,
                             const float *beta, int64_t T, double *state, double *out);

/* The chunked form in double (the same steps, padding included, in exact
 * arithmetic up to fp64 rounding: forward substitution for the triangular
 * solves, plain sums): against rc_gdn_recurrent64 it shows that the two
 * forms are one function. out [T][hv][dv], final_state NULL or
 * [hv][dk][dv]; from zeros. */
rc_status rc_gdn_chunked64(const rc_gdn_dims *d, const float *q, const float *k, const float *v, const float *g,
                           const float *beta, int64_t T, int64_t chunk, double *final_state, double *out);

#ifdef __cplusplus
}
#endif

#endif
