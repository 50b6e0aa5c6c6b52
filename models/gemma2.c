/* Gemma 2 family: transformers' Gemma2ForCausalLM (models/gemma2/modeling_gemma2.py).
 *
 * Llama's forward pass with these differences (docs/numerics.md "Gemma 2 and Gemma 3"):
 *  - Gemma2RMSNorm: x * rsqrt(mean x^2 + eps) in fp32, times (1.0 + weight.float()) in
 *    fp32, rounded once (rc_config.norm_w_offset, norm_w_f32);
 *  - four norms per layer: input_layernorm and pre_feedforward_layernorm before the
 *    blocks, post_attention_layernorm and post_feedforward_layernorm on their outputs
 *    before the residual add (rc_config.sandwich_norm);
 *  - the embedding times hidden_size ** 0.5 rounded to the dtype (embed_scale);
 *  - gelu_pytorch_tanh gating; scores scaled by query_pre_attn_scalar ** -0.5;
 *  - soft-capping cap * tanh(x / cap) of the scores (attn_logit_softcapping) and of the
 *    logits (final_logit_softcapping);
 *  - layer_types: sliding-window and global layers alternating (layer 0 sliding).
 * config.json (Gemma2Config defaults where a key is absent): num_key_value_heads (4),
 *   head_dim (256), hidden_activation (gelu_pytorch_tanh), rms_norm_eps (1e-6),
 *   max_position_embeddings (8192), tie_word_embeddings (true), attention_bias (false),
 *   query_pre_attn_scalar (256), sliding_window (4096), layer_types,
 *   final_logit_softcapping (30; null: none), attn_logit_softcapping (50; null: none),
 *   rope (default theta 10000; linear, llama3, yarn).
 * Tensors (optional "model." prefix on everything but lm_head): Llama's attention and MLP,
 *   layers.{i}.input_layernorm.weight, post_attention_layernorm.weight,
 *   pre_feedforward_layernorm.weight, post_feedforward_layernorm.weight [H] */
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_types[] = {"gemma2", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

static rc_status gemma2_parse(const json_t *root, const char *path, rc_config *cfg)
{
    static const rc_gemma_defaults d = {.n_kv_heads = 4, .final_softcap = 30.0, .attn_softcap_read = true,
                                        .pattern = 2, .pattern_key = NULL};
    RC_TRY(rc_gemma_parse(root, path, cfg, &d));
    RC_TRY(rc_config_parse_rope(root, path, cfg, 10000.0, 1.0, NULL, NULL));
    if (cfg->rotary_dim != cfg->head_dim)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: partial_rotary_factor below 1 for %s (transformers' Gemma 2 "
                         "rotates the whole head): not supported", path, cfg->model_type);
    return RC_OK;
}

/* Integer keys, read in this order (then eos_token_id, then gemma2_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, false, 256000, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 8192, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, 2, "bos_token_id"),
    {{NULL}, 0, 0, 0, false, 0},
};

static const rc_tensor_spec k_model_tensors[] = {
    RC_LLAMA_MODEL_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_tensor_spec k_layer_tensors[] = {
    RC_GEMMA_NORM_TENSORS,
    RC_LLAMA_QKV_TENSORS,
    {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_Q, RC_ALWAYS, false, NULL},
    {RC_LW_b_o, "self_attn.o_proj.bias", RC_DIM_H, RC_DIM_1, RC_IF_O_BIAS, false, NULL},
    RC_LLAMA_MLP_TENSORS(RC_ALWAYS),
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_gemma2 = {
    .family = "gemma2",
    .model_types = k_types,
    .keys = k_keys,
    .forward = {.norm = RC_NORM_RMS,
                .norm_bias = false,
                .residual = RC_RESIDUAL_SEQUENTIAL,
                .pos = RC_POS_ROTARY,
                .mlp = RC_MLP_GATED,
                .act = RC_ACT_GELU_TANH,
                .head = RC_HEAD_TIED},
    .prefixes = k_prefixes,
    .layer_stem = "layers.",
    .model_tensors = k_model_tensors,
    .layer_tensors = k_layer_tensors,
    .parse_config = gemma2_parse,
};
