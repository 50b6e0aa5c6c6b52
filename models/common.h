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

/* mlp_only_layers (Qwen2-MoE, Qwen3-MoE, Qwen3-Next): a list of layer indices into cfg->mlp_only, a bit set;
 * absent or null: none */
rc_status rc_parse_mlp_only(const json_t *root, const char *path, rc_config *cfg);

/* The DeepSeek-V3-style MoE that GLM-4.5 shares (models/glm4_moe.c; the
 * deepseek_v3 family, models/deepseek_v3.c, calls it the same way): the grouped sigmoid router
 * (rc_router_kind RC_ROUTER_SIGMOID_GROUPED, its gate and
 * e_score_correction_bias kept fp32, the weights fp32), shared experts
 * without a gate, and dense first layers. Reads, with the defaults given:
 *   n_shared_experts       (shared_intermediate = it x moe_intermediate_size)
 *   first_k_dense_replace  (layers below it dense: cfg->mlp_only)
 *   routed_scaling_factor  (a number > 0)
 *   norm_topk_prob
 * and checks n_group / topk_group (read by the family's key table into
 * cfg->n_group, cfg->topk_group) against n_experts and top_k: equal groups of
 * at least two experts, topk_group <= n_group, top_k <= the experts of
 * topk_group groups (else RC_ERR_FORMAT naming the file and the keys). */
typedef struct {
    int64_t n_shared;       /* n_shared_experts */
    int64_t first_dense;    /* first_k_dense_replace */
    double routed_scale;    /* routed_scaling_factor */
    bool norm_topk_prob;
} rc_grouped_moe_defaults;
rc_status rc_grouped_moe_parse(const json_t *root, const char *path, rc_config *cfg, const rc_grouped_moe_defaults *d);

/* The grouped MoE's tensors as transformers' Glm4MoeMoE and DeepseekV3MoE
 * name them (after "model.layers.{i}."): mlp.gate.e_score_correction_bias
 * [E] and the shared experts mlp.shared_experts.{gate,up,down}_proj.weight
 * [n_shared x Im, H] / [H, n_shared x Im] (rows for the layer table); the
 * router mlp.gate.weight [E, H] and the experts, per expert
 * mlp.experts.{e}.{gate,up,down}_proj.weight or fused as v5 saves them
 * (mlp.experts.gate_up_proj [E, 2 Im, H], mlp.experts.down_proj [E, H, Im]),
 * through rc_grouped_moe_experts (the family's rc_arch.experts). */
#define RC_GROUPED_MOE_TENSORS                                                                                    \
    {RC_LW_e_bias, "mlp.gate.e_score_correction_bias", RC_DIM_E, RC_DIM_1, RC_IF_ROUTER_BIAS, false, NULL},       \
        {RC_LW_w_sh_gate, "mlp.shared_experts.gate_proj.weight", RC_DIM_IS, RC_DIM_H, RC_IF_SHARED_EXPERT, false,  \
         NULL},                                                                                                   \
        {RC_LW_w_sh_up, "mlp.shared_experts.up_proj.weight", RC_DIM_IS, RC_DIM_H, RC_IF_SHARED_EXPERT, false,      \
         NULL},                                                                                                   \
        {RC_LW_w_sh_down, "mlp.shared_experts.down_proj.weight", RC_DIM_H, RC_DIM_IS, RC_IF_SHARED_EXPERT, false,  \
         NULL}
extern const rc_expert_spec rc_grouped_moe_experts;

/* OLMo 2's keys and tensors (models/olmo2.c), which OLMo 3 shares */
rc_status rc_olmo2_parse_common(const json_t *root, const char *path, rc_config *cfg);
extern const rc_config_key rc_olmo2_keys[];
extern const rc_tensor_spec rc_olmo2_model_tensors[];
extern const rc_tensor_spec rc_olmo2_layer_tensors[];

#endif
