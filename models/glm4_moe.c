/* GLM-4.5 / GLM-4.6 / GLM-4.5-Air: transformers' Glm4MoeForCausalLM
 * (models/glm4_moe/modeling_glm4_moe.py, transformers 5.24).
 *
 * Attention as Llama's with these settings (docs/numerics.md "GLM-4.5"):
 *  - partial rotary (partial_rotary_factor, default 0.5): rotate_half over a
 *    head's first rotary_dim dims, the rest passes (Glm4MoeAttention calls
 *    apply_rotary_pos_emb with q_rot = q[..., :rotary_dim]; not GLM-4's
 *    interleaved pairs, so no reordering at load);
 *  - q / k / v biases by attention_bias (default false), none on o_proj;
 *  - use_qk_norm (default false): q_norm / k_norm over each head's head_dim
 *    before RoPE, as Qwen3's.
 * Two norms per layer (input_layernorm, post_attention_layernorm). Layers
 * below first_k_dense_replace have the dense SwiGLU of intermediate_size; the
 * others are MoE: the grouped sigmoid router (rc_grouped_moe_parse in
 * models/common.c; the op: rco_moe_route_grouped_row, docs/routing.md
 * "Routers"), n_routed_experts experts of moe_intermediate_size, top
 * num_experts_per_tok, and n_shared_experts x moe_intermediate_size of shared
 * experts added without a gate.
 * config.json (Glm4MoeConfig defaults where absent): num_key_value_heads (8),
 *   head_dim (hidden_size // num_attention_heads), rms_norm_eps (1e-5),
 *   hidden_act (silu), max_position_embeddings (131072), tie_word_embeddings
 *   (false), attention_bias (false), use_qk_norm (false), n_routed_experts
 *   (128; alias num_local_experts), num_experts_per_tok (8),
 *   moe_intermediate_size (1408), n_shared_experts (1), n_group (1),
 *   topk_group (1), first_k_dense_replace (1), norm_topk_prob (true),
 *   routed_scaling_factor (1.0), rope (theta 10000; linear, llama3, yarn).
 *   num_nextn_predict_layers: the MTP layers after the last decoder layer are
 *   not part of the forward pass (transformers ignores their tensors too).
 * Tensors (after "model.layers.{i}."): Llama's attention and norms,
 *   self_attn.q_norm.weight / k_norm.weight [head_dim] (use_qk_norm);
 *   dense layers: mlp.{gate,up,down}_proj.weight;
 *   MoE layers: mlp.gate.weight [E, H], mlp.gate.e_score_correction_bias [E],
 *   mlp.experts.{e}.{gate,up,down}_proj.weight (or v5's fused
 *   mlp.experts.gate_up_proj [E, 2 Im, H], mlp.experts.down_proj [E, H, Im]),
 *   mlp.shared_experts.{gate,up,down}_proj.weight [n_shared x Im, H] / [H, ...]. */
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_types[] = {"glm4_moe", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

static rc_status glm4_moe_parse(const json_t *root, const char *path, rc_config *cfg)
{
    RC_TRY(rc_json_get_int(root, "num_key_value_heads", path, 1, cfg->n_heads, cfg->n_heads < 8 ? cfg->n_heads : 8,
                           &cfg->n_kv_heads, NULL));
    bool present;
    RC_TRY(rc_json_get_int(root, "head_dim", path, 1, RC_LIM_HEAD_DIM, 0, &cfg->head_dim, &present));
    if (!present) { /* getattr(config, "head_dim", hidden_size // num_attention_heads) */
        cfg->head_dim = cfg->hidden / cfg->n_heads;
        if (cfg->head_dim < 1)
            return rc_errorf(RC_ERR_FORMAT, "%s: hidden_size %lld is less than num_attention_heads %lld (and "
                             "head_dim is not given)", path, (long long)cfg->hidden, (long long)cfg->n_heads);
    }
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_act", path, "silu", &act, NULL));
    if (strcmp(act, "silu") != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: hidden_act \"%.32s\" is not supported for %s (supported: silu)",
                         path, act, cfg->model_type);
    cfg->act = RC_ACT_SILU;
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-5, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, false, &cfg->tie_embeddings, NULL));
    RC_TRY(rc_json_get_bool(root, "attention_bias", path, false, &cfg->qkv_bias, NULL));
    cfg->o_bias = cfg->mlp_bias = false;
    bool qk_norm;
    RC_TRY(rc_json_get_bool(root, "use_qk_norm", path, false, &qk_norm, NULL));
    cfg->qk_norm = qk_norm ? RC_QK_NORM_HEAD : RC_QK_NORM_NONE;
    if (cfg->top_k > cfg->n_experts)
        return rc_errorf(RC_ERR_FORMAT, "%s: num_experts_per_tok %lld exceeds the %lld experts", path,
                         (long long)cfg->top_k, (long long)cfg->n_experts);
    static const rc_grouped_moe_defaults k_moe = {.n_shared = 1, .first_dense = 1, .routed_scale = 1.0,
                                                  .norm_topk_prob = true};
    RC_TRY(rc_grouped_moe_parse(root, path, cfg, &k_moe));
    return rc_config_parse_rope(root, path, cfg, 10000.0, 0.5, NULL, NULL);
}

/* Integer keys, read in this order (then eos_token_id, then glm4_moe_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 131072, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    RC_KEY(n_experts, 2, 1 << 16, false, 128, "n_routed_experts", "num_local_experts"),
    RC_KEY(top_k, 1, 1 << 16, false, 8, "num_experts_per_tok"),
    RC_KEY(moe_intermediate, 1, RC_LIM_INTER, false, 1408, "moe_intermediate_size"),
    RC_KEY(n_group, 1, 1 << 16, false, 1, "n_group"),
    RC_KEY(topk_group, 1, 1 << 16, false, 1, "topk_group"),
    {{NULL}, 0, 0, 0, false, 0},
};

static const rc_tensor_spec k_model_tensors[] = {
    RC_LLAMA_MODEL_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_tensor_spec k_layer_tensors[] = {
    {RC_LW_ln1_w, "input_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    RC_LLAMA_QKV_TENSORS,
    {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_Q, RC_ALWAYS, false, NULL},
    RC_LLAMA_QK_NORM_TENSORS,
    RC_LLAMA_MLP_TENSORS(RC_IF_DENSE),
    RC_GROUPED_MOE_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_glm4_moe = {
    .family = "glm4_moe",
    .model_types = k_types,
    .keys = k_keys,
    .forward = {.norm = RC_NORM_RMS,
                .norm_bias = false,
                .residual = RC_RESIDUAL_SEQUENTIAL,
                .pos = RC_POS_ROTARY,
                .mlp = RC_MLP_GATED,
                .act = RC_ACT_SILU,
                .head = RC_HEAD_UNTIED},
    .prefixes = k_prefixes,
    .layer_stem = "layers.",
    .model_tensors = k_model_tensors,
    .layer_tensors = k_layer_tensors,
    .parse_config = glm4_moe_parse,
    .experts = &rc_grouped_moe_experts,
};
