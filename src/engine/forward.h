/* The forward pass, written once against rc_backend, and the two ways
 * ratiocheck drives it: a full forward over whole sequences (how a trainer
 * re-scores) and KV-cached decoding (prefill, then one token per step for the
 * whole batch, how a sampler generates). */
#ifndef RC_FORWARD_H
#define RC_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "cuda_ws.h"
#include "model.h"
#include "moe.h"

/* The dtype model (README "Numerics"): what a framework running the model in
 * `dt` computes. Weights are rounded to dt once; each op's output is rounded
 * to dt where PyTorch eager rounds it, except the ops named in `upcast`,
 * which keep fp32. */
#define RC_UPCAST_SOFTMAX 1u /* attention scores and softmax stay fp32 until the probabilities */
#define RC_UPCAST_ROPE 2u    /* RoPE in fp32: q, k (and the cached k) stay fp32 (GPT-NeoX 4.37-4.44) */
#define RC_UPCAST_NORM 4u    /* LayerNorm / RMSNorm outputs stay fp32 */
#define RC_UPCAST_LM_HEAD 8u /* LM head weight unrounded, logits fp32 */

/* How a side holds its model: PURE, the model converted to the dtype
 * (model.to(bf16), FSDP's param_dtype, Megatron's Float16Module); AUTOCAST,
 * fp32 master weights run under torch.autocast(dtype) (accelerate's bf16=True
 * on an fp32 model, verl's actor): fp32 embedding, residual stream, norms and
 * RoPE, GEMM operands cast to the dtype (README "Numerics: autocast"). */
typedef enum { RC_PREC_PURE, RC_PREC_AUTOCAST } rc_precision;

/* Tensor parallelism (README "Numerics", docs/research/tp-allreduce.md): the
 * row-parallel layers (attention output, MLP down) split K into tp
 * contiguous slices, one per rank; each rank's partial is the GEMM over its
 * slice rounded to the dtype, and the partials are summed by the all-reduce
 * the stack uses. Column-parallel layers and the vocab-parallel LM head give
 * the values of one device. */
typedef enum {
    RC_TP_REDUCE_FP32,  /* vLLM / SGLang custom all-reduce (also NCCL NVLS / symmetric kernels): an fp32 sum in rank
                         * order 0, 1, ..., tp-1, rounded once */
    RC_TP_REDUCE_RING,  /* NCCL ring: rounded after every add; the element's chunk c (one chunk per rank, by its
                         * position in the tensor) summed c+1, c+2, ..., c */
    RC_TP_REDUCE_CHAIN, /* NCCL tree on one node (a chain): ((P[tp-1] + P[tp-2]) + ...) + P[0], rounded per add */
    RC_TP_REDUCE_SEQ,   /* torch symmetric-memory two-shot: ((P[0] + P[1]) + ...) + P[tp-1], rounded per add */
} rc_tp_reduce;

#define RC_TP_MAX 256 /* largest tp accepted */

/* "fp32", "ring", "chain", "seq" */
rc_status rc_parse_tp_reduce(const char *s, rc_tp_reduce *out);
const char *rc_tp_reduce_name(rc_tp_reduce r);
/* Weight quantization of the linear layers (QKV, O, MLP up / gate / down; the
 * embedding and the LM head stay in the dtype), README "Numerics: fp8
 * weights", docs/research/fp8-weights.md. NONE: the weights in the dtype.
 * FP8: float8_e4m3fn values with scales, quantized at engine creation from
 * the weights rounded to the dtype (a bf16 master synced to an fp8 rollout
 * engine): per TENSOR (vLLM's online quantization of a bf16 checkpoint, one
 * scale per fused layer: QKV, gate + up), per output CHANNEL, or in BLOCKs of
 * 128 x 128. Activations quantized per call: dynamic per TOKEN (vLLM's
 * default where CUTLASS runs fp8; 1 x 128 groups with block weights),
 * dynamic per TENSOR, or NONE (W8A16: the weights dequantized to the dtype,
 * R(q * R(s)), and the plain linear rule). */
/* STORED: an FP8 block checkpoint's own fp8 weights and block scales
 * (fp8w.h rc_fp8w_create_stored), 1 x (block depth) activation groups */
typedef enum { RC_WQ_NONE, RC_WQ_FP8, RC_WQ_STORED } rc_wquant;
typedef enum { RC_WSCALE_TENSOR, RC_WSCALE_CHANNEL, RC_WSCALE_BLOCK } rc_wscale;
typedef enum { RC_ACTQ_TOKEN, RC_ACTQ_TENSOR, RC_ACTQ_NONE } rc_actquant;
typedef struct {
    rc_wquant kind;    /* the zero value: NONE */
    rc_wscale scale;   /* default TENSOR */
    rc_actquant act;   /* default TOKEN */
} rc_wq_numerics;
#define RC_FP8_BLOCK 128 /* block weights: 128 x 128 blocks, activations in 1 x 128 groups */

typedef struct {
    rc_dtype dt;         /* RC_F32, RC_BF16 or RC_F16 */
    unsigned upcast;     /* RC_UPCAST_* */
    rc_dtype logprob_dt; /* RC_F32: log-softmax in fp32 (default); dt: in the model dtype */
    float temperature;   /* logits are divided by it before the log-softmax */
    bool alibi_rowmax;   /* ALiBi bias minus its row max: slope * (key - query) (--alibi-bias rowmax) */
    rc_precision mode;   /* pure dtype (the default) or torch.autocast over fp32 master weights */
    /* Megatron-LM's --fp32-residual-connection (pure mode, bf16 / fp16; README
     * "Numerics: Megatron's fp32 flags"): the embedding output widened to fp32
     * and every residual add in fp32 (a parallel residual's mlp + attn pair
     * still in the dtype); norms read the fp32 stream, compute in fp32 and
     * round once at the output (apex's mixed-dtype norms) */
    bool residual_f32;
    /* the KV cache's storage (a sampler's kv-cache=): RC_KV_AUTO keeps the
     * values as computed; RC_KV_FP8_* stores them as vLLM's fp8 cache does,
     * with kv_scale (> 0) as both k_scale and v_scale (rco_kv_value) */
    rc_kv_quant kv_quant;
    float kv_scale;
    int tp;              /* tensor-parallel degree of the row-parallel layers (0 or 1: none) */
    rc_tp_reduce tp_reduce;
    bool tp_trainer;     /* Megatron / TE's row-parallel layer: the bias added after the reduce, KV heads split
                          * (never replicated); else vLLM / SGLang's: the bias in rank 0's partial */
    rc_wq_numerics wq;   /* the linear layers' weights: in the dtype (default) or fp8 */
    /* latent attention (mla.h; DeepSeek-V3): false, the expanded K / V of
     * transformers (a trainer); true, the absorbed decode of vLLM / SGLang
     * (a latent cache, q_nope . W_UK, o . W_UV) */
    bool mla_absorbed;
    /* with mla_absorbed: a call's sequences that bring more than one new
     * token (a prefill) run the expanded form from the same projections, as
     * vLLM's and SGLang's MLA backends prefill; one-token steps decode
     * absorbed (the side key mla=engine; docs/mla.md) */
    bool mla_prefill_expanded;
    /* MoE layers (moe.h): router_f32, the router's logits left in fp32 (the bf16 GEMM's fp32 accumulator
     * unrounded) and its weights kept fp32, else logits in the dtype (transformers, vLLM); route_replay, the
     * experts replayed from the engine's routing hook (R3), the weights recomputed */
    bool router_f32;
    bool route_replay;
    /* router=dtype given explicitly: a family whose router transformers keeps fp32 and vLLM computes in the
     * dtype (cfg router_gate_engine_dt, DeepSeek-V3) takes vLLM's gate: its weight rounded to the dtype, its
     * logits rounded once (docs/routing.md "DeepSeek-V3's gate in the engines"); other families ignore it */
    bool router_dtype;
    /* Gated DeltaNet layers (hybrid models; docs/linear-attention-cache.md): state_dtype, the recurrent state
     * kept in the dtype (rounded at the end of every call) instead of fp32; gdn_chunk, the chunked form's chunk
     * (0: 64, transformers' and FLA's); prefix_cache, a fresh sequence's state after all its tokens but the
     * last restored from a copy in the dtype and the last token run through the chunked form from it
     * (SGLang's prefix cache) */
    bool state_dtype;
    int64_t gdn_chunk;
    bool prefix_cache;
    /* every activation buffer held as fp32, even where a GPU would hold them at the dtype's width
     * (forward.c engine_act_st): set for a run whose capture hook reads the buffers (the trace), and by the
     * tests that compare the two storages; changes no result */
    bool act_f32;
} rc_numerics;

/* RC_OK when model c can run with num's TP degree; else RC_ERR_UNSUPPORTED
 * (one line naming the dimension): tp must divide the heads and the MLP's
 * intermediate size, and the KV heads (vLLM / SGLang: or be a multiple of
 * them, each KV head replicated; Megatron: divide them). */
rc_status rc_tp_check(const rc_config *c, const rc_numerics *num);

/* The all-reduce of a row-parallel layer's partials parts [tp][M][N]
 * (backend memory; rank 0's part is overwritten) into y [M, N] by
 * num->tp_reduce, each rounding to out_dt; on the Megatron side
 * (num->tp_trainer) then y = R(y + bias) (bias may be NULL). Element i of y
 * is element elem0 + i of the reduced tensor of numel elements (the ring's
 * chunks are the whole tensor's). zero_rows: M zeros (host). tp >= 2. */
rc_status rc_tp_reduce_partials(rc_backend *be, const rc_numerics *num, float *parts, int64_t M, int64_t N,
                                 const float *bias, rc_dtype out_dt, int64_t elem0, int64_t numel,
                                 const int64_t *zero_rows, float *y);

/* A row-parallel linear, y[M, N] = x[M, K] . W[N, K]^T + bias, as num->tp
 * ranks compute it (num->tp <= 1: one matmul, bias fused). Partial r =
 * R(x[:, r K/tp : (r+1) K/tp] . W[...]^T) (rank 0's + bias on the vLLM side),
 * into parts [tp][M][N] (backend memory), then rc_tp_reduce_partials into y
 * (elem0, numel: the rows' place in the whole forward call). */
rc_status rc_row_parallel_linear(rc_backend *be, const rc_numerics *num, const float *x, int64_t M, int64_t K,
                                 rc_wt W, int64_t N, const float *bias, rc_dtype in_dt, rc_dtype out_dt,
                                 int64_t elem0, int64_t numel, float *parts, const int64_t *zero_rows, float *y);

/* Parse "softmax,rope,norm,lm_head" (or "none", "all") into RC_UPCAST_* bits. */
rc_status rc_parse_upcast(const char *s, unsigned *out);
/* Inverse, into buf ("none" when 0). */
const char *rc_upcast_str(unsigned upcast, char *buf, size_t n);

/* Capture of every op's output (ratiocheck trace, src/check/trace.c): an
 * engine with a hook calls it after each op of the forward pass with the
 * rows the op just computed; with no hook (the default) nothing is called and
 * the results are bitwise those of an engine without this field. The ops in
 * forward order; SCORES and PROBS are never passed to a hook (the fused
 * attention kernel does not materialise them): the trace recomputes them from
 * ROPE's q and k with the same per-row arithmetic (ops_inline.h). */
typedef enum {
    RC_TOP_EMBED,      /* the residual stream's input (embedding, + positions, + embedding norm); layer -1 */
    RC_TOP_NORM1,      /* the attention block's norm */
    RC_TOP_QKV,        /* the QKV GEMM (after MPT's clamp) */
    RC_TOP_ROPE,       /* q and k after RoPE (the row's first (nh + nkv) * d values) */
    RC_TOP_SCORES,     /* (derived) the scores of each head over the keys */
    RC_TOP_PROBS,      /* (derived) the softmax probabilities */
    RC_TOP_STATE,      /* Gated DeltaNet layers: the recurrent state [hv][dk][dv] a sequence's slot holds after a
                        * call, at the call's last position (the trace keeps each side's last one) */
    RC_TOP_ATTN,       /* P.V, the attention output */
    RC_TOP_O,          /* the output projection (after the TP all-reduce) */
    RC_TOP_RESID_ATTN, /* sequential residual: x + attn_out */
    RC_TOP_NORM2,      /* the MLP's norm */
    RC_TOP_ROUTE,      /* MoE layers: the routing (moe.h rc_moe_route_capture: chosen experts, then weights) */
    RC_TOP_UP,         /* the MLP's up GEMM */
    RC_TOP_GATE,       /* the gate GEMM (gated MLPs) */
    RC_TOP_ACT,        /* the activation (SwiGLU: act(gate) * up) */
    RC_TOP_DOWN,       /* the down GEMM (after the TP all-reduce) */
    RC_TOP_RESID,      /* the residual stream after the layer */
    RC_TOP_NORM_F,     /* the final norm (rows with logits only); layer n_layers */
    RC_TOP_LOGITS,     /* the LM head's logits; layer n_layers */
    RC_TOP_COUNT
} rc_trace_op;

/* short names ("embed", "norm1", "qkv", "rope", ...), "?" out of range */
const char *rc_trace_op_name(rc_trace_op op);

typedef struct {
    int64_t layer;            /* -1: before the layers; n_layers: after them */
    rc_trace_op op;
    int side;                 /* the hook's side (rc_capture_hook.side) */
    int64_t seq0;             /* the hook's seq0 */
    const rc_batch_desc *bd;  /* the call */
    int64_t n;                /* rows captured: packed rows rows[i] of bd (rows NULL: row0 + i) */
    int64_t row0;
    const int64_t *rows;
    int64_t call_rows;        /* the M of the op's call (the row chunk, or the LM head's chunk) */
    const float *data;        /* backend memory: row i at data + i * stride, width values */
    int64_t width, stride;
    rc_dtype dt;              /* the dtype the op's output was rounded to */
    const rc_attn_params *ap; /* ROPE: the attention parameters of the layer, else NULL */
    const rc_kv_cache *kv;    /* ROPE: the engine's KV cache (its quantisation), else NULL */
} rc_capture;

/* copies what it needs (be->ops->download), returns RC_OK or an error that ends the call */
typedef rc_status (*rc_capture_fn)(void *ctx, rc_backend *be, const rc_capture *c);
typedef struct {
    rc_capture_fn fn; /* NULL: no capture */
    void *ctx;
    int side;         /* passed through: the trace's 0 sampler, 1 trainer */
    int64_t seq0;     /* passed through: the run's sequence index of cache slot 0 */
} rc_capture_hook;

/* Replaces a step's target log-probs (ratiocheck score's trainer-side top-k /
 * top-p, src/check/rollout.c): when fn is set, a step that asks for target
 * log-probs and no full rows computes each LM-head chunk's full log-prob rows
 * [n, V] into buf (host, the caller's: logit_rows x vocab floats) and fn
 * writes target_out[i] of the chunk's n rows from them. Zero: the plain path. */
typedef rc_status (*rc_target_fn)(void *ctx, const float *lp, int64_t n, int64_t V, const int32_t *targets,
                                  float *target_out);
typedef struct {
    rc_target_fn fn;
    void *ctx;
    float *buf;
} rc_target_hook;

/* A hybrid model's cache beside the KV cache (docs/linear-attention-cache.md):
 * kind[l] of each layer the forward runs (RC_CACHE_KV or RC_CACHE_STATE) and
 * index[l], its place among the layers of its kind; the KV cache holds K and
 * V of the KV layers only (a layer's attention is called with its index).
 * Per state layer and slot: the conv state [conv_c][conv_k] (values of the
 * dtype: the conv's last inputs) and the recurrent state [hv][dk][dv]
 * (values of state_dt), fp32 arrays in host memory. absorbed[slot]: the
 * tokens 0 .. absorbed - 1 the slot's states hold, in order; a call that
 * starts a slot neither at 0 nor at absorbed is refused. kind NULL: a model
 * without linear layers. */
enum { RC_CACHE_KV = 0, RC_CACHE_STATE = 1 };
typedef struct {
    unsigned char *kind;
    int64_t *index;
    int64_t n_state_layers, n_slots, conv_c, conv_k;
    rc_gdn_dims gd;
    rc_dtype state_dt;
    float *conv, *state;
    int64_t *absorbed;
} rc_state_cache;

typedef struct {
    const rc_model *model;
    rc_backend *be;
    rc_numerics num;
    rc_weights w;        /* the weights this engine computes with (values rounded to num.dt; forward.c
                          * plan_weight: GEMM weights in place or at the dtype's width, vectors fp32) */
    float *w_arena;      /* the copies (backend memory; bytes, in floats), or NULL */
    float *lm_head_own;  /* the LM head's own copy (fp32 under --upcast lm_head on a GPU, NormHead), or NULL */
    float *inv_freq_own; /* RoPE inv_freq in the backend's memory (GPU), else NULL */
    float *slopes_own;   /* ALiBi slopes in the backend's memory (GPU), else NULL */
    struct rc_fp8w *fp8w; /* num.wq FP8: the quantized linear layers and their scratch (fp8w.h), else NULL */
    rc_kv_cache kv;
    /* latent attention with mla_prefill_expanded: the expanded form's projections, its K / V cache (written
     * by every prefill call) and the rows' mix of the two forms' o_proj inputs (3 x chunk rows); else NULL */
    struct rc_mla *mla_x;
    rc_kv_cache kv_x;
    float *mla_mix;
    int64_t *mla_mix_ix;
    rc_state_cache st;   /* a hybrid model's linear layers (kind NULL otherwise) */
    /* scratch activations, sized for max_rows packed rows */
    int64_t max_rows;
    float *x, *h, *qkv, *att, *mlp_a, *mlp_b, *tmp, *logits;
    rc_dtype mlp_st;    /* how mlp_a and mlp_b hold their values: RC_F32 (floats), or the dtype's 2-byte bits
                         * (forward.c engine_mlp_st; docs/gpu.md "Activations at the dtype's width") */
    rc_dtype qkv_st, att_st, h_st, tmp_st, mlpc_st, logits_st, x_st; /* the same for qkv, att, h, tmp, mlp_c,
                                                                       * logits, x and lt (engine_act_st) */
    float *mlp_c;       /* the MLP's output rows of one chunk */
    float *lt, *lh;     /* the LM head's input rows: gathered from x, normalised [logit_rows, hidden] */
    int64_t chunk_rows; /* rows of h, qkv, att, tmp, mlp_*: a call runs in row chunks of at most this many
                         * (x holds every row) */
    int64_t logit_rows; /* rows of logits computed per chunk */
    /* host index scratch of a step, allocated once: row0 [max_rows] (a step
     * has at most one sequence per row), pos and seq_of_row [max_rows],
     * rc_full_forward's slots / starts / rows [max_rows], and 0, 1, ...
     * [max_rows] for copying a chunk's rows */
    int64_t *ix;
    float *tp_parts;       /* the row-parallel layers' partials [tp][chunk_rows][hidden] (tp > 1), else NULL */
    int64_t *tp_zero_rows; /* max_rows zeros (host; tp > 1), else NULL */
    rc_capture_hook hook;  /* zero: no capture (set by the caller after rc_engine_create) */
    rc_target_hook target; /* zero: targets' log-probs as computed (set by the caller) */
    struct rc_moe_scratch *moe; /* a MoE model's scratch (moe.h), else NULL */
    struct rc_mla *mla;         /* a latent-attention model's scratch and absorbed weights (mla.h), else NULL */
    rc_routing_hook routing;    /* zero: the routing is not recorded (set by the caller; moe.h) */
    /* a hybrid model's scratch [max_rows] rows: in_proj_qkvz, in_proj_ba and the mixer's outputs, and the
     * attention output gate (NULL otherwise) */
    float *gdn_qkvz, *gdn_ba, *gdn_out, *attn_gate;
    /* A layer split over the backend's devices (be->n_devices > 1; docs/gpu.md "Several GPUs"): device s
     * holds layers [stage_l0[s], stage_l0[s + 1]) -- their weights, their KV cache -- and its own activation
     * buffers and scratch; device 0 also the embedding, the final norm and the LM head. The fields above are
     * the current device's (cur_stage); the others' wait in stage[]. n_stages 1: one device, stage NULL. */
    int n_stages, cur_stage;
    int64_t stage_l0[RC_MAX_DEVICES + 1];
    struct rc_engine_stage *stage;
} rc_engine;

/* Create an engine for up to n_slots sequences of up to max_len tokens and
 * up to max_rows packed rows per call, computing with numerics `num`. */
rc_status rc_engine_create(const rc_model *m, rc_backend *be, const rc_numerics *num,
                           int64_t n_slots, int64_t max_len, int64_t max_rows, rc_engine **out);
/* What an engine for these arguments holds, in bytes (checked arithmetic;
 * RC_ERR_NOMEM when a size overflows): weights_copy, the weights it copies
 * (rounded to the dtype, at its width; the fp32 LM head of --upcast lm_head
 * on a GPU; NormHead's copy); weights_in_place, the model's weights in the
 * mapped checkpoint it reads as they are; the KV cache; the activations;
 * total = copies + KV cache + activations. The model's arena
 * (rc_model.arena_bytes) comes on top. m may be loaded headers only. */
typedef struct {
    int64_t weights_copy, weights_in_place, kv_cache, activations, total;
    int64_t state_cache; /* a hybrid model's conv and recurrent states (in total too) */
    int64_t workspaces;  /* on a GPU (host_memory false): the CUDA backend's workspaces (rc_cuda_ws_bytes, one
                          * device), not in total: the GPU holds total + workspaces */
} rc_engine_mem;
rc_status rc_engine_mem_estimate(const rc_model *m, const rc_numerics *num, bool host_memory, rc_kernels kernels,
                                 int64_t n_slots, int64_t max_len, int64_t max_rows, rc_engine_mem *out);

/* The CUDA backend's workspaces on one device for an engine of these sizes (cuda_ws.h, each one's size as the
 * backend computes it, at the largest rows, sequences, keys and widths the engine's calls have): ws[i] the
 * bytes workspace i holds at most (RC_CUWS_SHADOW: the backend's copies of the engine's fp32 weights, held
 * with the engine). The device holds layers [l_lo, l_hi); dev0: the embedding and the LM head too (the
 * log-probs). RC_ERR_NOMEM when a size overflows. rc_cuda_ws_total: their sum. */
rc_status rc_cuda_ws_bytes(const rc_model *m, const rc_numerics *num, rc_kernels k, int64_t n_slots,
                           int64_t max_len, int64_t max_rows, int64_t l_lo, int64_t l_hi, bool dev0,
                           int64_t ws[RC_CUWS_N]);
int64_t rc_cuda_ws_total(const int64_t ws[RC_CUWS_N]);

/* The layers of each of n_dev devices (a layer split, docs/gpu.md "Several GPUs"): given (n_dev counts, or
 * NULL) checked against the model (each >= 1, their sum its layers: RC_ERR_USAGE naming both), else an even
 * split by weight bytes (device 0 also holds the embedding and LM head); l0 [n_dev + 1]: device s holds
 * layers [l0[s], l0[s + 1]). With bytes non-NULL, bytes[s] gets device s's share of the device memory
 * estimate (weights + KV cache + activations, as rc_engine_mem_estimate's on a GPU, + the CUDA backend's
 * workspaces there, rc_cuda_ws_bytes; weights[s] and kv[s]
 * too when non-NULL). */
rc_status rc_layer_split(const rc_model *m, const rc_numerics *num, rc_kernels kernels, int n_dev,
                         const int64_t *given, int64_t n_slots, int64_t max_len, int64_t max_rows, int64_t *l0,
                         int64_t *bytes, int64_t *weights, int64_t *kv);

/* RC_OK when num's precision mode can run: mode=autocast needs bf16 / fp16
 * and no upcast but the LM head (RC_ERR_USAGE), and, with a model config c,
 * a rotary family it covers (RC_ERR_UNSUPPORTED); residual_f32 the same
 * (but upcasts allowed) in pure mode only; c NULL: the model-free checks
 * only (the CLI, before the model is loaded). */
rc_status rc_autocast_supported(const rc_config *c, const rc_numerics *num);

/* fp32, no upcasts, temperature 1 */
rc_numerics rc_numerics_fp32(void);
void rc_engine_free(rc_engine *e);

/* Run the model on new tokens for a set of sequences (their earlier tokens
 * must already be in the cache). For each packed row r listed in out_rows
 * (n_out of them), the next-token log-probs: full vectors into full_out
 * [n_out, V] (may be NULL) and/or the log-prob of targets[i] into target_out[i]
 * (both may be NULL). */
rc_status rc_engine_step(rc_engine *e, const int64_t *slots, const int64_t *starts,
                         const int64_t *n_new, int64_t n_seq, const int32_t *tokens,
                         const int64_t *out_rows, int64_t n_out, float *full_out,
                         const int32_t *targets, float *target_out);

/* Full forward of n_seq sequences (lens[b] tokens each, tokens packed) in one
 * batched pass from an empty cache; full_out [sum(lens), V] gets the
 * log-probs at every position. */
rc_status rc_full_forward(rc_engine *e, const int32_t *tokens, const int64_t *lens, int64_t n_seq,
                          float *full_out);

#endif
