/* GPT-NeoX (Pythia): transformers' GPTNeoXForCausalLM.
 *
 * config.json: hidden_act ("gelu" = exact erf GELU), layer_norm_eps,
 *   use_parallel_residual, rotary_pct / rotary_emb_base (or, from transformers
 *   v5, rope_parameters.partial_rotary_factor / rope_theta), attention_bias,
 *   tie_word_embeddings. head_dim = hidden_size / num_attention_heads.
 * Tensors (optional "gpt_neox." prefix on everything but embed_out):
 *   embed_in.weight                              [V, H]
 *   layers.{i}.input_layernorm.{weight,bias}     [H]
 *   layers.{i}.post_attention_layernorm.*        [H]
 *   layers.{i}.attention.query_key_value.weight  [3H, H]  rows interleaved per head:
 *                                                row h*3d + p*d + i, p = 0 q / 1 k / 2 v
 *   layers.{i}.attention.query_key_value.bias    [3H]     same layout
 *   layers.{i}.attention.dense.{weight,bias}     [H, H], [H]
 *   layers.{i}.mlp.dense_h_to_4h.{weight,bias}   [I, H], [I]
 *   layers.{i}.mlp.dense_4h_to_h.{weight,bias}   [H, I], [H]
 *   final_layer_norm.{weight,bias}               [H]
 *   embed_out.weight                             [V, H]  (untied unless tie_word_embeddings)
 * Forward details: LayerNorm with bias, partial rotate-half RoPE on the first
 * rotary_dim dims of each head, parallel or sequential residual, untied head.
 * The vocabulary (V) is usually padded beyond the tokenizer's size. */
#include <string.h>

#include "common.h"
#include "json_util.h"
#include "model.h"

static const char *const k_types[] = {"gpt_neox", NULL};
static const char *const k_prefixes[] = {"gpt_neox.", "", NULL};

static rc_status neox_parse(const json_t *root, const char *path, rc_config *cfg)
{
    RC_TRY(rc_heads_from_hidden(path, cfg)); /* head_dim = hidden / heads, no GQA */
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_act", path, "gelu", &act, NULL));
    if (strcmp(act, "gelu") == 0)
        cfg->act = RC_ACT_GELU_ERF;
    else if (strcmp(act, "gelu_new") == 0)
        cfg->act = RC_ACT_GELU_NEW; /* NewGELUActivation: a chain of tensor ops */
    else if (strcmp(act, "gelu_pytorch_tanh") == 0)
        cfg->act = RC_ACT_GELU_TANH;
    else
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "%s: hidden_act \"%.32s\" is not supported for gpt_neox (supported: gelu, "
                         "gelu_new, gelu_pytorch_tanh)",
                         path, act);
    RC_TRY(rc_config_get_norm_eps(root, path, "layer_norm_eps", 1e-5, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "use_parallel_residual", path, cfg->parallel_residual, &cfg->parallel_residual,
                            NULL));
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, cfg->tie_embeddings, &cfg->tie_embeddings, NULL));
    bool bias;
    RC_TRY(rc_json_get_bool(root, "attention_bias", path, true, &bias, NULL));
    cfg->qkv_bias = cfg->o_bias = bias;
    cfg->mlp_bias = true;
    return rc_config_parse_rope(root, path, cfg, 10000.0, 0.25, "rotary_emb_base", "rotary_pct");
}

/* Integer keys, read in this order (then eos_token_id, then neox_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 2048, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    {{NULL}, 0, 0, 0, false, 0},
};

/* Tensors, in arena order (after the optional "gpt_neox." prefix). */
static const rc_tensor_spec k_model_tensors[] = {
    {RC_MW_embed, "embed_in.weight", RC_DIM_V, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_MW_lnf_w, "final_layer_norm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_MW_lnf_b, "final_layer_norm.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_MW_lm_head, "embed_out.weight", RC_DIM_V, RC_DIM_H, RC_IF_UNTIED, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_tensor_spec k_layer_tensors[] = {
    {RC_LW_ln1_w, "input_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln1_b, "input_layernorm.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_b, "post_attention_layernorm.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_qkv, "attention.query_key_value.weight", RC_DIM_3H, RC_DIM_H, RC_ALWAYS, false,
     rc_qkv_deinterleave_per_head},
    {RC_LW_b_qkv, "attention.query_key_value.bias", RC_DIM_3H, RC_DIM_1, RC_IF_QKV_BIAS, false,
     rc_qkv_deinterleave_per_head},
    {RC_LW_w_o, "attention.dense.weight", RC_DIM_H, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_b_o, "attention.dense.bias", RC_DIM_H, RC_DIM_1, RC_IF_O_BIAS, false, NULL},
    {RC_LW_w_up, "mlp.dense_h_to_4h.weight", RC_DIM_I, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_b_up, "mlp.dense_h_to_4h.bias", RC_DIM_I, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_down, "mlp.dense_4h_to_h.weight", RC_DIM_H, RC_DIM_I, RC_ALWAYS, false, NULL},
    {RC_LW_b_down, "mlp.dense_4h_to_h.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_gpt_neox = {
    .family = "gpt_neox",
    .model_types = k_types,
    .keys = k_keys,
    /* LayerNorm with bias, parallel residual unless use_parallel_residual is
     * false, rotary, plain GELU MLP, untied embed_out unless tie_word_embeddings */
    .forward = {.norm = RC_NORM_LAYER,
                .norm_bias = true,
                .residual = RC_RESIDUAL_PARALLEL,
                .pos = RC_POS_ROTARY,
                .mlp = RC_MLP_PLAIN,
                .act = RC_ACT_GELU_ERF,
                .head = RC_HEAD_UNTIED},
    .prefixes = k_prefixes,
    .layer_stem = "layers.",
    .model_tensors = k_model_tensors,
    .layer_tensors = k_layer_tensors,
    .parse_config = neox_parse,
};
