/* The mixture-of-experts MLP of one layer (Qwen2-MoE, Mixtral, Qwen3-MoE,
 * GLM-4.5), run by the forward pass over a chunk of rows: the router GEMM,
 * the routing op (moe_route; the grouped sigmoid router: moe_route_grouped),
 * each expert's SwiGLU over the rows routed to it (grouped by
 * expert, so the M of each expert's GEMMs is the number of rows of the call
 * that chose it), the weighted sums (moe_accumulate) in transformers' order,
 * and the shared expert (Qwen2-MoE's gated one, GLM-4.5's ungated ones).
 * docs/numerics.md "Mixture of experts". */
#ifndef RC_MOE_H
#define RC_MOE_H

#include "backend.h"

/* Where the routing of a MoE layer can be recorded, and where a replaying
 * side (R3, routing=replay) gets its experts from. fn: called once per layer
 * and row chunk with the experts the layer used and their weights (host
 * arrays, [n][top_k], experts as exact integers in floats, weights as the op
 * computed them) for rows [row0, row0 + n) of the call bd (under replay, the
 * router's own choice before the replayed experts replace it). replay: on a side
 * with rc_moe_rounding.replay, called before the experts run to fill
 * experts [n][top_k] with the recorded experts of those rows (a row whose
 * first entry is negative has none and keeps its own routing). */
typedef struct {
    rc_status (*fn)(void *ctx, const rc_batch_desc *bd, int64_t layer, int64_t row0, int64_t n, int64_t top_k,
                    const float *experts, const float *weights);
    rc_status (*replay)(void *ctx, const rc_batch_desc *bd, int64_t layer, int64_t row0, int64_t n, int64_t top_k,
                        float *experts);
    void *ctx;
} rc_routing_hook;

/* Scratch of the MoE layers for up to max_rows rows (backend memory and host
 * index arrays), allocated once per engine. */
typedef struct rc_moe_scratch rc_moe_scratch;

/* floats of backend memory and bytes of host memory the scratch takes (false
 * when a size overflows); fused: with the buffers of the fused-MoE rule
 * (weights=as-stored: each row's k expert outputs, [max_rows, k, hidden]) */
bool rc_moe_scratch_size(const rc_config *c, int64_t max_rows, bool fused, int64_t *backend_floats,
                         int64_t *host_bytes);
rc_status rc_moe_scratch_create(rc_backend *be, const rc_config *c, int64_t max_rows, bool fused,
                                rc_moe_scratch **out);
void rc_moe_scratch_free(rc_backend *be, rc_moe_scratch *s);

/* The rounding of a MoE layer: every GEMM output and the accumulations in
 * linear (the model dtype), the SwiGLU product in act, GEMM inputs fed as
 * in_norm (the norm's output) and in_act (the SwiGLU product). */
typedef struct {
    rc_dtype linear, act, in_norm, in_act;
    bool router_f32; /* router=fp32: the router's logits unrounded (fp32) and its weights kept fp32 */
    bool replay;     /* routing=replay: the experts from the hook's replay, the weights recomputed */
    /* weights=as-stored (NULL otherwise): the experts' stored FP8 weights, run as vLLM's fused MoE kernel
     * computes them (docs/numerics.md "Experts as stored"); the scratch made with fused. fp8_linear: y [M, N] =
     * part (0 gate, 1 up, 2 down) of expert e (n_experts: the shared experts) of layer l over x [M, K],
     * rounded to out_dt once, rw NULL or each row's weight multiplied into its fp32 sum first
     * (fp8w.h rc_fp8w_expert_cb with fp8 = the rc_fp8w) */
    rc_status (*fp8_linear)(void *fp8, rc_backend *be, int64_t l, int64_t e, int part, const float *x, int64_t M,
                            const float *rw, rc_dtype out_dt, float *y);
    void *fp8;
    bool router_gate_dt; /* a router kept fp32 computed as vLLM's gate (numerics router_dtype on a family with
                          * router_gate_engine_dt): the logits rounded to linear, the weight already rounded */
} rc_moe_rounding;

/* out [n, hidden] = the MoE MLP of layer l (a MoE layer of c) over the
 * normalised rows h [n, hidden] (rows [row0, row0 + n) of the call bd; hook:
 * NULL or where the routing goes and, with r->replay, comes from). */
rc_status rc_moe_forward(rc_backend *be, const rc_config *c, const rc_layer_weights *L, int64_t l, const float *h,
                         int64_t n, const rc_batch_desc *bd, int64_t row0, const rc_moe_rounding *r, rc_moe_scratch *s,
                         const rc_routing_hook *hook, float *out);

/* After rc_moe_forward over n rows: the routing it used as rows of 2E floats
 * in backend memory (*out, the scratch's): [0, E) 1 where the expert was
 * chosen, else 0; [E, 2E) its weight, 0 where not chosen (the trace's route
 * op: element e < E differs when the two sides' expert sets do). */
rc_status rc_moe_route_capture(rc_backend *be, const rc_config *c, rc_moe_scratch *s, int64_t n, const float **out);

/* The same in double (the fp64 reference, forward64.c): softmax, top-k,
 * weights and sums in double, no rounding. mm64: its GEMM. */
typedef rc_status (*rc_mm64_fn)(const double *x, int64_t M, int64_t K, rc_wt W, int64_t N, rc_wt bias, double *y);
rc_status rc_moe_forward64(const rc_config *c, const rc_layer_weights *L, const double *h, int64_t n,
                           rc_mm64_fn mm64, double *out);

/* The CPU backend's MoE ops (backend.h: zero, moe_route, moe_accumulate),
 * the CUDA kernels' twins. */
rc_status rc_cpu_zero(rc_backend *be, float *x, int64_t n);
rc_status rc_cpu_moe_route(rc_backend *be, const float *logits, int64_t M, int64_t E, int64_t top_k, int renorm,
                           rc_dtype w_dt, float *sel, float *w);
rc_status rc_cpu_bias_add(rc_backend *be, float *y, int64_t M, int64_t N, const float *bias, rc_dtype out_dt);
rc_status rc_cpu_swiglu_clamp(rc_backend *be, float *gate, const float *up, int64_t n, float alpha, float limit,
                              rc_dtype dt);
rc_status rc_cpu_moe_route_grouped(rc_backend *be, const float *logits, const float *bias, int64_t M,
                                   const rco_grouped_router *g, float *sel, float *w);
/* the checks every backend makes on a grouped router's sizes (RC_ERR_INTERNAL
 * naming them: the config reader refuses such a model first) */
rc_status rc_moe_grouped_check(const rco_grouped_router *g);
rc_status rc_cpu_moe_accumulate(rc_backend *be, const float *y, int64_t n, int64_t H, const int64_t *rows,
                                const float *w, const int64_t *widx, bool sigmoid, rc_dtype dt, float *out);

#endif
