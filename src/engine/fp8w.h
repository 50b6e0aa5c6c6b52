/* fp8 e4m3 weights for the linear layers (--sampler weights=fp8): the
 * weights quantized once at engine creation, the activations per call, and
 * the quantized GEMM with its scales, as vLLM's fp8 linear methods compute
 * them (README "Numerics: fp8 weights", docs/research/fp8-weights.md).
 * The GEMMs are the backend's matmul over fp8 values (exact in bf16, exact
 * products in fp32; held as bf16 bits, 2 bytes each, on the CPU, and as
 * float8_e4m3fn codes, 1 byte each, on a device, whose fp8_matmul widens
 * them exactly), in the kernel strategy's order; the quantization and the
 * scales are computed here on the CPU, and on a device backend (CUDA) by its
 * fp8 kernels (backend.h fp8_quant_act / fp8_epilogue; kernels/fp8.cu), the
 * same scalar rules (ops_inline.h rco_fp8w_*). */
#ifndef RC_FP8W_H
#define RC_FP8W_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "forward.h"

/* the quantized linear layers of a transformer block */
typedef enum { RC_FP8W_QKV, RC_FP8W_O, RC_FP8W_UP, RC_FP8W_GATE, RC_FP8W_DOWN, RC_FP8W_N } rc_fp8w_which;

/* an expert's linear layers under weights=as-stored (gate_proj, up_proj,
 * down_proj) */
typedef enum { RC_FP8W_EX_GATE, RC_FP8W_EX_UP, RC_FP8W_EX_DOWN, RC_FP8W_EX_N } rc_fp8w_expart;

typedef struct rc_fp8w rc_fp8w;

/* RC_OK when an engine can run wq on this model (on any backend):
 * RC_ERR_USAGE for a combination that is no setting of vLLM's (fp8 with
 * dtype fp32 or autocast; block weights with per-tensor activations),
 * RC_ERR_UNSUPPORTED for what is not emulated (block weights on a model whose
 * GEMM depths or fused row counts are not multiples of 128). c NULL: the
 * model's checks are left out. */
rc_status rc_fp8w_supported(const rc_config *c, const rc_numerics *num);

/* Quantize every linear layer of w (values of num->dt, in be's memory) for
 * num->wq, on the host (a device's weights are copied back once). W8A16
 * (act NONE): the layers' weights in *w are replaced by the dequantized
 * R(q * R(s)) copies this object owns on the host; on a device it holds the
 * codes and R(s) and the weights in *w are emptied (rc_fp8w_deq_device). W8A8:
 * rc_fp8w_linear computes them; rows: the most rows one call passes (its
 * scratch, in be's memory). The object keeps be, which must outlive it. */
rc_status rc_fp8w_create(rc_backend *be, const rc_config *c, const rc_numerics *num, int64_t rows, rc_weights *w,
                         rc_fp8w **out);
/* weights=as-stored: the layers' fp8 codes and block scales of an FP8
 * checkpoint (m's quant_method fp8, its files open) as stored, no
 * requantization; activations per token in 1 x (block depth) groups and the
 * block GEMM, as vLLM / SGLang serve a block-FP8 checkpoint
 * (docs/numerics.md). RC_ERR_USAGE when m is not an FP8 checkpoint,
 * RC_ERR_UNSUPPORTED for a layout vLLM refuses too (a GEMM depth that is not
 * a multiple of the block's, a merged layer's part that is not whole blocks). */
rc_status rc_fp8w_create_stored(rc_backend *be, const rc_model *m, const rc_numerics *num, int64_t rows,
                                rc_fp8w **out);
/* The same over a layer split (forward.c, docs/gpu.md "Several GPUs"): device d (be->ops->set_device) holds
 * the quantized copies of layers [l0[d], l0[d + 1]) and its own W8A8 scratch; rc_fp8w_linear and
 * rc_fp8w_expert_linear run on the layer's device (the caller makes it current). n_dev 1 or l0 NULL: one
 * device, as rc_fp8w_create / rc_fp8w_create_stored. Device 0 is current after. */
rc_status rc_fp8w_create_split(rc_backend *be, const rc_config *c, const rc_numerics *num, int64_t rows,
                               rc_weights *w, int n_dev, const int64_t *l0, rc_fp8w **out);
rc_status rc_fp8w_create_stored_split(rc_backend *be, const rc_model *m, const rc_numerics *num, int64_t rows,
                                      int n_dev, const int64_t *l0, rc_fp8w **out);
/* bytes of the quantized copies of layer l alone (rc_fp8w_bytes' weights are their sum over the layers) */
bool rc_fp8w_layer_bytes(const rc_config *c, const rc_numerics *num, bool host, int64_t l, int64_t *bytes);
void rc_fp8w_free(rc_fp8w *f);
/* bytes the object holds for this model: the quantized weights and scales
 * (on the host 2-byte values: the fp8 values as bf16, W8A16's dequantized
 * copy as the dtype; on a device backend (host false) the fp8 values as
 * 1-byte codes, each buffer rounded up to whole floats, and the scales), and
 * the W8A8 scratch of `rows` rows (on a device with the 2-byte workspace
 * engine kernels widen the largest matrix's codes into; W8A16 on a device:
 * that workspace alone, which its codes are dequantized into) (checked
 * arithmetic; false on overflow) */
bool rc_fp8w_bytes(const rc_config *c, const rc_numerics *num, bool host, int64_t rows, int64_t *weights,
                   int64_t *scratch);
/* true when the layers' GEMMs go through rc_fp8w_linear (W8A8) */
bool rc_fp8w_w8a8(const rc_fp8w *f);
/* true for W8A16 on a device backend: the layers' weights held as float8_e4m3fn codes (1 byte) and their scales
 * rounded to the dtype, dequantized per call (the engine's weight fields for them are empty): their GEMMs go
 * through rc_fp8w_deq_linear, or over rc_fp8w_deq_weight's 2-byte copy */
bool rc_fp8w_deq_device(const rc_fp8w *f);
/* y [M, N] = the plain linear (bias, in_dt, out_dt as matmul's) of x [M, K] with layer l's W8A16 weight
 * `which`, R(q * R(s)) in the dtype (rco_fp8w_deq), the backend's fp8_deq_matmul: the results of the matmul
 * over the CPU's dequantized copy, to the bit. The layer's device current. */
rc_status rc_fp8w_deq_linear(rc_backend *be, rc_fp8w *f, int64_t l, rc_fp8w_which which, const float *x, int64_t M,
                             const float *bias, rc_dtype in_dt, rc_dtype out_dt, float *y);
/* *W = layer l's W8A16 weight `which` dequantized into the device's 2-byte workspace (valid until the next call
 * on that device that uses it): for TP's K-sliced partials. The layer's device current. */
rc_status rc_fp8w_deq_weight(rc_backend *be, rc_fp8w *f, int64_t l, rc_fp8w_which which, rc_wt *W);
/* true when f holds layer l's weight `which` (weights=as-stored leaves out
 * latent attention's projections, read dequantized, and a MoE layer's dense
 * MLP, which it has not) */
bool rc_fp8w_has(const rc_fp8w *f, int64_t l, rc_fp8w_which which);
/* weights=as-stored on a mixture-of-experts model: true when f holds the
 * experts of its MoE layers (each expert's gate / up / down as stored, and
 * the shared experts as expert n_experts) */
bool rc_fp8w_has_experts(const rc_fp8w *f);
/* y [M, N] = expert e's (n_experts: the shared experts') part of layer l
 * over x [M, K] (be's memory): the block GEMM of weights=as-stored, rounded
 * to out_dt once; rw: NULL, or [M] weights (be's memory) each row's fp32
 * sum is multiplied by before that rounding (vLLM's fused_moe_kernel with
 * MUL_ROUTED_WEIGHT) */
rc_status rc_fp8w_expert_linear(rc_backend *be, rc_fp8w *f, int64_t l, int64_t e, rc_fp8w_expart part,
                                const float *x, int64_t M, const float *rw, rc_dtype out_dt, float *y);
/* the same with f as void * and part as int (moe.h rc_moe_rounding.fp8_linear) */
rc_status rc_fp8w_expert_cb(void *f, rc_backend *be, int64_t l, int64_t e, int part, const float *x, int64_t M,
                            const float *rw, rc_dtype out_dt, float *y);

/* y [M, N] = layer `l`'s quantized linear `which` over x [M, K] (values of the
 * dtype; x, bias, y in be's memory, be the backend the object was made on): x quantized (per token, per tensor or 1 x 128 groups), the fp8 GEMM,
 * scales and bias as the kernel applies them, rounded to out_dt. */
rc_status rc_fp8w_linear(rc_backend *be, rc_fp8w *f, int64_t l, rc_fp8w_which which, const float *x, int64_t M,
                         const float *bias, rc_dtype out_dt, float *y);

/* The steps on plain arrays (tests/test_fp8w.c checks each against torch):
 * W [N, K] to fp8 values q [N, K] and scales s ([1], [N], or [ceil(N/128)] x
 * [ceil(K/128)] for blocks); amax: NULL, or the amax of the fused layer W
 * belongs to (per tensor). */
void rc_fp8w_quant_weight(const float *w, int64_t N, int64_t K, rc_wscale mode, const float *amax, float *q,
                          float *s);
/* x [M, K] to fp8 values q and scales sa ([1] per tensor, [M] per token, [M] x
 * [K/128] in groups of 128 when groups) */
void rc_fp8w_quant_act(const float *x, int64_t M, int64_t K, rc_actquant mode, bool groups, float *q, float *sa);
/* The whole linear of one weight matrix: w [N, K] and bias (values of dt)
 * quantized per wq, x [M, K] (values of dt), y [M, N] rounded to dt; every
 * array host memory, on any backend (a device's copies made and freed here). */
rc_status rc_fp8w_linear_once(rc_backend *be, const float *x, int64_t M, int64_t K, const float *w, int64_t N,
                              const float *bias, const rc_wq_numerics *wq, rc_dtype dt, float *y);

/* weights=as-stored's linear on host arrays: stored fp8 values q [N, K] and
 * block scales s [ceil(N / b0)][K / b1], x [M, K] (values of dt) quantized in
 * 1 x b1 groups (into xq [M, K] and sx [M][K / b1] when not NULL), the block
 * GEMM, y [M, N] rounded to dt (rw: NULL, or [M] row weights multiplied into
 * the fp32 sums first, as rc_fp8w_expert_linear). A host-memory backend. */
rc_status rc_fp8w_stored_linear_once(rc_backend *be, const float *x, int64_t M, int64_t K, const float *q,
                                     const float *s, int64_t N, int64_t b0, int64_t b1, const float *rw, rc_dtype dt,
                                     float *y, float *xq, float *sx);

#endif
