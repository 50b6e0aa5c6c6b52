/* GLM-4 family (GLM-4-9B-0414, GLM-Z1): transformers' Glm4ForCausalLM
 * (models/glm4/modeling_glm4.py).
 *
 * Llama's forward pass (the same RMSNorm, cos / sin cast to the dtype, eager
 * attention) with these differences (docs/numerics.md "GLM-4"):
 *  - four norms per layer: input_layernorm before attention,
 *    post_self_attn_layernorm on its output before the residual add,
 *    post_attention_layernorm before the MLP, post_mlp_layernorm on its output
 *    (rc_config.sandwich_norm: ln1, post_attn_ln, ln2, post_mlp_ln);
 *  - partial rotary (partial_rotary_factor, default 0.5) in GLM's interleaved
 *    layout: dims 2j and 2j + 1 of a head's first rotary_dim rotate together by
 *    frequency j (cos[..., :dim/2].repeat_interleave(2), rotate_half on even /
 *    odd dims). The q and k rows (and biases) are reordered at load into
 *    rotate_half's layout (rc_rope_interleaved_to_half): the same rotation of
 *    the same pairs, element for element;
 *  - gate and up come from one fused gate_up_proj (gate rows, then up rows);
 *  - q / k / v biases by attention_bias (default true), none on o_proj;
 *  - eos_token_id absent or null: [151329, 151336, 151338] (Glm4Config).
 * config.json (Glm4Config defaults where a key is absent): num_key_value_heads
 *   (2), head_dim (128), rms_norm_eps (1.5625e-7), hidden_act (silu),
 *   max_position_embeddings (131072), tie_word_embeddings (false),
 *   attention_bias (true), rope (default theta 10000; linear, llama3, yarn).
 * Tensors (optional "model." prefix on everything but lm_head): Llama's names
 *   for embed / norm / lm_head, q/k/v/o_proj, down_proj, input_layernorm,
 *   post_attention_layernorm, plus per layer
 *   post_self_attn_layernorm.weight [H], post_mlp_layernorm.weight [H],
 *   mlp.gate_up_proj.weight [2 I, H]. */
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_types[] = {"glm4", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

static rc_status glm4_parse(const json_t *root, const char *path, rc_config *cfg)
{
    const json_t *kv = json_object_get(root, "num_key_value_heads");
    if (kv && json_is_null(kv))
        cfg->n_kv_heads = cfg->n_heads;
    else
        RC_TRY(rc_json_get_int(root, "num_key_value_heads", path, 1, RC_LIM_HEADS, 2, &cfg->n_kv_heads, NULL));
    RC_TRY(rc_json_get_int(root, "head_dim", path, 1, RC_LIM_HEAD_DIM, 128, &cfg->head_dim, NULL));
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_act", path, "silu", &act, NULL));
    if (strcmp(act, "silu") != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: hidden_act \"%.32s\" is not supported for %s (supported: silu)",
                         path, act, cfg->model_type);
    cfg->act = RC_ACT_SILU;
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 0.00000015625, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, false, &cfg->tie_embeddings, NULL));
    RC_TRY(rc_json_get_bool(root, "attention_bias", path, true, &cfg->qkv_bias, NULL));
    cfg->o_bias = cfg->mlp_bias = false;
    cfg->sandwich_norm = true;
    const json_t *eos = json_object_get(root, "eos_token_id");
    if (!eos || json_is_null(eos)) { /* Glm4Config.__post_init__: None -> these three */
        static const int64_t k_eos[] = {151329, 151336, 151338};
        for (int i = 0; i < 3; i++)
            cfg->eos_ids[cfg->n_eos++] = k_eos[i];
    }
    return rc_config_parse_rope(root, path, cfg, 10000.0, 0.5, NULL, NULL);
}

/* Integer keys, read in this order (then eos_token_id, then glm4_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 131072, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    {{NULL}, 0, 0, 0, false, 0},
};

static const rc_tensor_spec k_model_tensors[] = {
    RC_LLAMA_MODEL_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

/* q and k rows (and biases) reordered from GLM's interleaved RoPE pairs */
static const rc_tensor_spec k_layer_tensors[] = {
    {RC_LW_ln1_w, "input_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_post_attn_ln_w, "post_self_attn_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_IF_SANDWICH_NORM, false, NULL},
    {RC_LW_ln2_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_post_mlp_ln_w, "post_mlp_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_IF_SANDWICH_NORM, false, NULL},
    {RC_LW_w_qkv, "self_attn.q_proj.weight", RC_DIM_Q, RC_DIM_H, RC_ALWAYS, false, rc_rope_interleaved_to_half},
    {RC_LW_w_qkv, "self_attn.k_proj.weight", RC_DIM_KV, RC_DIM_H, RC_ALWAYS, true, rc_rope_interleaved_to_half},
    {RC_LW_w_qkv, "self_attn.v_proj.weight", RC_DIM_KV, RC_DIM_H, RC_ALWAYS, true, NULL},
    {RC_LW_b_qkv, "self_attn.q_proj.bias", RC_DIM_Q, RC_DIM_1, RC_IF_QKV_BIAS, false, rc_rope_interleaved_to_half},
    {RC_LW_b_qkv, "self_attn.k_proj.bias", RC_DIM_KV, RC_DIM_1, RC_IF_QKV_BIAS, true, rc_rope_interleaved_to_half},
    {RC_LW_b_qkv, "self_attn.v_proj.bias", RC_DIM_KV, RC_DIM_1, RC_IF_QKV_BIAS, true, NULL},
    {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_Q, RC_ALWAYS, false, NULL},
    {RC_LW_w_gate, "mlp.gate_up_proj.weight", RC_DIM_I, RC_DIM_H, RC_ALWAYS, RC_PIECE_HALF0, NULL},
    {RC_LW_w_up, "mlp.gate_up_proj.weight", RC_DIM_I, RC_DIM_H, RC_ALWAYS, RC_PIECE_HALF1, NULL},
    {RC_LW_w_down, "mlp.down_proj.weight", RC_DIM_H, RC_DIM_I, RC_ALWAYS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_glm4 = {
    .family = "glm4",
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
    .parse_config = glm4_parse,
};
