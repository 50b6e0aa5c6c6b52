/* Helpers shared by the family files: layouts in which checkpoints store a
 * weight differently from the forward pass's [out, in] rows, undone in place
 * right after a tensor is read (rc_tensor_spec.fix), and config rules several
 * families share. */
#ifndef RC_MODELS_COMMON_H
#define RC_MODELS_COMMON_H

#include <stdint.h>

#include "model.h"

/* Fused QKV stored per head, as GPT-NeoX and BLOOM do: row h*3d + p*d + i
 * (p = 0 q, 1 k, 2 v; d = head_dim) -> row p*H + h*d + i, i.e. all Q rows,
 * then K, then V. rows = 3 * n_heads * head_dim; cols = the row length (1 for
 * the bias); elements of elem_size bytes. */
rc_status rc_qkv_deinterleave_per_head(const rc_config *cfg, void *data, int elem_size, int64_t rows, int64_t cols);

/* Conv1D as GPT-2 stores it: [in, out] -> [out, in] (a transpose; the
 * tensor's table entry gives the file shape [in, out]). */
rc_status rc_conv1d_transpose(const rc_config *cfg, void *data, int elem_size, int64_t rows, int64_t cols);

/* GLM's interleaved RoPE pairs (dims 2j, 2j + 1 of a head's first
 * rotary_dim, rotated by frequency j) moved to rotate_half's layout (dims j
 * and j + rotary_dim / 2): in each head of a q or k projection (weight rows
 * or bias), row 2j -> j and 2j + 1 -> rotary_dim / 2 + j; the rest of the
 * head stays. The rotation is then Llama's on the same pairs, element for
 * element, and q.k sums the same products (in another order); v and the
 * attention output are untouched. rows: a multiple of head_dim. */
rc_status rc_rope_interleaved_to_half(const rc_config *cfg, void *data, int elem_size, int64_t rows, int64_t cols);

/* Families without GQA or an explicit head_dim: head_dim = hidden / n_heads
 * and n_kv_heads = n_heads; a remainder is RC_ERR_FORMAT naming the file and
 * the two keys as the family's key table names them ("n_embd 64 is not a
 * multiple of n_head 5"). */
rc_status rc_heads_from_hidden(const char *path, rc_config *cfg);

/* Gemma 2 and Gemma 3 (text): what their configs share, read by both
 * parse hooks (docs/numerics.md "Gemma 2 and Gemma 3"): heads and head_dim
 * (256), hidden_activation (gelu_pytorch_tanh; gelu), rms_norm_eps (1e-6),
 * tie_word_embeddings (true), attention_bias, query_pre_attn_scalar (256),
 * final_logit_softcapping, attn_logit_softcapping (read only when
 * attn_softcap_read: Gemma 3's attention never passes it on), sliding_window
 * (4096; null: none), layer_types (else layer i slides unless (i + 1) % pattern
 * == 0); use_bidirectional_attention refused; the (1 + w) norms, four per
 * layer, and the sqrt(hidden) embedding scale set. */
typedef struct {
    int64_t n_kv_heads;       /* num_key_value_heads' default */
    double final_softcap;     /* final_logit_softcapping's default (0: None) */
    bool attn_softcap_read;
    int64_t pattern;          /* the sliding pattern's default */
    const char *pattern_key;  /* the key that overrides it, or NULL */
} rc_gemma_defaults;
rc_status rc_gemma_parse(const json_t *root, const char *path, rc_config *cfg, const rc_gemma_defaults *d);

/* The four norms of a Gemma decoder layer (sandwich_norm). */
#define RC_GEMMA_NORM_TENSORS                                                                                     \
    {RC_LW_ln1_w, "input_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},                          \
        {RC_LW_post_attn_ln_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},    \
        {RC_LW_ln2_w, "pre_feedforward_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},            \
        {RC_LW_post_mlp_ln_w, "post_feedforward_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL}

/* Rows shared by the families with Llama's tensor names (llama, qwen3, olmo2,
 * the MoE families), each used in its table where that family reads them.
 * Shapes: embed [V, H], norm [H], lm_head [V, H] (untied only); q [nh*d, H],
 * k / v [nkv*d, H] appended into the fused [Q; K; V] matrix, their biases with
 * attention_bias; q_norm / k_norm [QNORM] / [KNORM] (per head or whole
 * projection, by family); gate / up [I, H], down [H, I] under COND. */
#define RC_LLAMA_MODEL_TENSORS                                                                                    \
    {RC_MW_embed, "embed_tokens.weight", RC_DIM_V, RC_DIM_H, RC_ALWAYS, false, NULL},                             \
        {RC_MW_lnf_w, "norm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},                                 \
        {RC_MW_lm_head, "lm_head.weight", RC_DIM_V, RC_DIM_H, RC_IF_UNTIED, false, NULL}
#define RC_LLAMA_QKV_TENSORS                                                                                      \
    {RC_LW_w_qkv, "self_attn.q_proj.weight", RC_DIM_Q, RC_DIM_H, RC_ALWAYS, false, NULL},                         \
        {RC_LW_w_qkv, "self_attn.k_proj.weight", RC_DIM_KV, RC_DIM_H, RC_ALWAYS, true, NULL},                     \
        {RC_LW_w_qkv, "self_attn.v_proj.weight", RC_DIM_KV, RC_DIM_H, RC_ALWAYS, true, NULL},                     \
        {RC_LW_b_qkv, "self_attn.q_proj.bias", RC_DIM_Q, RC_DIM_1, RC_IF_QKV_BIAS, false, NULL},                  \
        {RC_LW_b_qkv, "self_attn.k_proj.bias", RC_DIM_KV, RC_DIM_1, RC_IF_QKV_BIAS, true, NULL},                  \
        {RC_LW_b_qkv, "self_attn.v_proj.bias", RC_DIM_KV, RC_DIM_1, RC_IF_QKV_BIAS, true, NULL}
#define RC_LLAMA_QK_NORM_TENSORS                                                                                  \
    {RC_LW_q_norm_w, "self_attn.q_norm.weight", RC_DIM_QNORM, RC_DIM_1, RC_IF_QK_NORM, false, NULL},              \
        {RC_LW_k_norm_w, "self_attn.k_norm.weight", RC_DIM_KNORM, RC_DIM_1, RC_IF_QK_NORM, false, NULL}
#define RC_LLAMA_MLP_TENSORS(COND)                                                                                \
    {RC_LW_w_gate, "mlp.gate_proj.weight", RC_DIM_I, RC_DIM_H, COND, false, NULL},                                \
        {RC_LW_w_up, "mlp.up_proj.weight", RC_DIM_I, RC_DIM_H, COND, false, NULL},                                \
        {RC_LW_w_down, "mlp.down_proj.weight", RC_DIM_H, RC_DIM_I, COND, false, NULL}

/* OLMo 2's keys and tensors (models/olmo2.c), which OLMo 3 shares */
rc_status rc_olmo2_parse_common(const json_t *root, const char *path, rc_config *cfg);
extern const rc_config_key rc_olmo2_keys[];
extern const rc_tensor_spec rc_olmo2_model_tensors[];
extern const rc_tensor_spec rc_olmo2_layer_tensors[];

#endif
