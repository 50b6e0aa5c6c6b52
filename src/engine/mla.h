/* Multi-head latent attention (DeepSeek-V2 / V3; docs/mla.md): the
 * projections around the shared rope and attention ops, in the two forms a
 * trainer and an inference engine compute.
 *
 * EXPANDED (transformers, a trainer): k_nope and v of every head from the
 * latent through kv_b_proj; attention over n_heads heads of
 * qk_nope + qk_rope values (each head's RoPE values first), the value heads
 * zero-padded to that width; the cache holds the expanded K and V.
 * ABSORBED (vLLM / SGLang's MLA decode): q_nope of each head multiplied by
 * its W_UK (kv_b_proj's k rows), R(q_nope . W_UK) in the dtype; one shared
 * key [k_rope, latent] and value [0, latent] (multi-query attention of
 * qk_rope + kv_lora_rank values: the cache holds the normalised latent and
 * the rotated k_rope); each head's output over the latents multiplied by
 * its W_UV (kv_b_proj's v rows), R(o . W_UV^T), then o_proj.
 *
 * Both write the packed q/k/v rows of the shared attention op (nh query
 * heads, nkv key / value heads of d values: rc_mla_attn_shape) with gathers
 * (backend gather_rows over a unit of u floats, u = gcd of the widths), so
 * every backend runs them with the ops it has. */
#ifndef RC_MLA_H
#define RC_MLA_H
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "model.h"

/* the attention's shape: expanded n_kv_heads = n_heads, d = nope + rope;
 * absorbed n_kv_heads = 1, d = rope + kv_lora_rank */
void rc_mla_attn_shape(const rc_config *c, bool absorbed, int64_t *nkv, int64_t *d);
/* (absorbed is ignored for a model without latent attention: cfg's shape) */

/* The dtypes of the projections (forward.c's rounding rules): every GEMM's
 * output (bias added first), the norms' cast before the weight and their
 * output, the block input's dtype (a_in) and the weights' */
typedef struct {
    rc_dtype linear, norm_mid, norm, in_dt, wd;
} rc_mla_rounding;

typedef struct rc_mla rc_mla;

/* Scratch of chunk_rows rows: floats of backend memory, host bytes (index
 * scratch), and the absorbed form's W_UK^T copies (floats); false when a size
 * overflows. */
bool rc_mla_scratch_size(const rc_config *c, bool absorbed, int64_t chunk_rows, int64_t *floats, int64_t *host_bytes);
/* An engine's MLA state (NULL unless c->mla): scratch, index arrays and, when
 * absorbed, each layer's W_UK^T [n_heads][kv_lora][nope] from m's weights
 * rounded to dt (vLLM's W_UK_T, SGLang's w_kc: kv_b_proj's values in the
 * dtype, no product folded), as fp32 in backend memory. */
rc_status rc_mla_create(rc_backend *be, const rc_model *m, bool absorbed, rc_dtype dt, int64_t chunk_rows,
                        rc_mla **out);
void rc_mla_free(rc_backend *be, rc_mla *x);

/* The packed q/k/v rows [n, (nh + 2 nkv) d] of layer l for n rows of the
 * attention block's input a_in [n, hidden] (before RoPE). */
rc_status rc_mla_qkv(rc_backend *be, const rc_config *c, rc_mla *x, const rc_layer_weights *L, int64_t l,
                     const float *a_in, int64_t n, const rc_mla_rounding *r, float *qkv);
/* Where the attention op writes its output [n, nh d] for rc_mla_out. */
float *rc_mla_att_buf(rc_mla *x);
/* The o_proj input [n, nh * v_head_dim] from the attention output (*out:
 * scratch); att_dt: the attention output's dtype. */
rc_status rc_mla_out(rc_backend *be, const rc_config *c, rc_mla *x, const rc_layer_weights *L, int64_t n,
                     const rc_mla_rounding *r, rc_dtype att_dt, const float **out);

/* The fp64 reference (forward64.c): the expanded rows [n, 3 nh d] of layer
 * L in double from h [n, hidden], and the o_proj input [n, nh v] from the
 * attention output att [n, nh d]. mm: forward64's GEMM. */
typedef rc_status (*rc_mla_mm64)(const double *x, int64_t M, int64_t K, rc_wt W, int64_t N, rc_wt bias, double *y);
rc_status rc_mla_qkv64(const rc_config *c, const rc_layer_weights *L, const double *h, int64_t n, rc_mla_mm64 mm,
                       double *qkv);
void rc_mla_out64(const rc_config *c, const double *att, int64_t n, double *out);

#endif
