/* gpt-oss family: transformers' GptOssForCausalLM (models/gpt_oss/modeling_gpt_oss.py).
 *
 * Llama's layer (RMSNorm before attention and MLP, GQA, rotate_half RoPE)
 * with (docs/numerics.md "gpt-oss"):
 *  - attention sinks: a learned logit per query head (self_attn.sinks) joins
 *    every softmax as one more column, dropped after the softmax, so the
 *    probabilities of the keys sum to less than 1;
 *  - sliding-window and full layers from layer_types (sliding_window keys;
 *    without layer_types GptOssConfig makes the even layers sliding);
 *  - YaRN RoPE (GptOssConfig's default rope: factor 32, beta_fast 32,
 *    beta_slow 1, truncate false, original_max_position_embeddings 4096);
 *  - q/k/v/o biases (attention_bias, default true), the RMSNorm weight
 *    multiplied in fp32 with one rounding ((weight * x).to(dtype));
 *  - every layer a MoE layer: a router with a bias, top-k of its logits then
 *    a softmax over the k chosen (in the logits' dtype), experts with biases
 *    and the clamped SwiGLU ((clamp(up, -l, l) + 1) * g * sigmoid(alpha g),
 *    g = min(gate, l); swiglu_limit l, swiglu_alpha), gate and up interleaved
 *    in one gate_up_proj [E, hidden, 2 I] (gate = [..., ::2]).
 * config.json: vocab_size, hidden_size, num_hidden_layers,
 *   num_attention_heads, num_key_value_heads (null or absent:
 *   num_attention_heads), head_dim (64; null: hidden / heads),
 *   intermediate_size (each expert's), num_local_experts (num_experts),
 *   num_experts_per_tok, rms_norm_eps (1e-5), hidden_act (silu: not used by
 *   the experts, which always run the clamped SwiGLU), swiglu_alpha (1.702),
 *   swiglu_limit (7.0), attention_bias (true), sliding_window (128),
 *   layer_types, rope_parameters / rope_scaling + rope_theta (150000),
 *   tie_word_embeddings (false), max_position_embeddings (131072).
 * Tensors (after "model.layers.{i}."): self_attn.{q,k,v,o}_proj.{weight,bias},
 *   self_attn.sinks [heads], input_layernorm / post_attention_layernorm,
 *   mlp.router.weight [E, H], mlp.router.bias [E],
 *   mlp.experts.gate_up_proj [E, H, 2I], mlp.experts.gate_up_proj_bias [E, 2I],
 *   mlp.experts.down_proj [E, I, H], mlp.experts.down_proj_bias [E, H]; the
 *   published MXFP4 experts (<name>_blocks + <name>_scales, quantization_config
 *   quant_method mxfp4) are dequantized to these by the safetensors reader
 *   (src/formats/quant.h). */
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_types[] = {"gpt_oss", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

#define GPT_OSS_THETA 150000.0 /* GptOssConfig.default_theta */

/* GptOssConfig.__post_init__'s rope when config.json gives none */
static rc_status gpt_oss_rope(const json_t *root, const char *path, rc_config *cfg)
{
    const json_t *rp = json_object_get(root, "rope_parameters"), *rs = json_object_get(root, "rope_scaling");
    if ((rp && !json_is_null(rp)) || (rs && !json_is_null(rs)))
        return rc_config_parse_rope(root, path, cfg, GPT_OSS_THETA, 1.0, NULL, NULL);
    json_t *r = json_deep_copy(root);
    json_t *y = json_pack("{s:s, s:f, s:f, s:f, s:b, s:i}", "rope_type", "yarn", "factor", 32.0, "beta_fast", 32.0,
                          "beta_slow", 1.0, "truncate", 0, "original_max_position_embeddings", 4096);
    rc_status s = RC_OK;
    if (!r || !y || json_object_set(r, "rope_scaling", y) != 0)
        s = rc_errorf(RC_ERR_NOMEM, "out of memory");
    if (s == RC_OK)
        s = rc_config_parse_rope(r, path, cfg, GPT_OSS_THETA, 1.0, NULL, NULL);
    json_decref(y);
    json_decref(r);
    return s;
}

static rc_status gpt_oss_parse(const json_t *root, const char *path, rc_config *cfg)
{
    bool present;
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-5, &cfg->norm_eps));
    RC_TRY(rc_json_get_int(root, "num_key_value_heads", path, 1, cfg->n_heads, cfg->n_heads, &cfg->n_kv_heads, NULL));
    RC_TRY(rc_json_get_int(root, "head_dim", path, 1, 4096, 64, &cfg->head_dim, &present));
    if (!present && json_object_get(root, "head_dim")) { /* null: hidden_size // num_attention_heads */
        if (cfg->hidden % cfg->n_heads != 0)
            return rc_errorf(RC_ERR_FORMAT, "%s: hidden_size %lld is not a multiple of num_attention_heads %lld "
                             "(and head_dim is null)", path, (long long)cfg->hidden, (long long)cfg->n_heads);
        cfg->head_dim = cfg->hidden / cfg->n_heads;
    }
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_act", path, "silu", &act, NULL));
    if (strcmp(act, "silu") != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: hidden_act \"%.32s\" is not supported for gpt_oss (supported: silu)",
                         path, act);
    cfg->act = RC_ACT_SILU;
    RC_TRY(rc_json_get_num(root, "swiglu_alpha", path, -1e6, 1e6, 1.702, &cfg->swiglu_alpha, NULL));
    RC_TRY(rc_json_get_num(root, "swiglu_limit", path, 1e-30, 1e30, 7.0, &cfg->swiglu_limit, NULL));
    bool ab;
    RC_TRY(rc_json_get_bool(root, "attention_bias", path, true, &ab, NULL));
    cfg->qkv_bias = cfg->o_bias = ab;
    cfg->mlp_bias = false;
    cfg->moe_bias = true;
    cfg->attn_sinks = true;
    cfg->moe_topk_softmax = true;
    cfg->norm_w_f32 = true; /* GptOssRMSNorm: (self.weight * hidden_states).to(input_dtype) */
    cfg->moe_intermediate = cfg->intermediate;
    cfg->shared_intermediate = 0;
    cfg->norm_topk_prob = false;
    cfg->moe_weights_f32 = false; /* softmax(..., dtype=router_top_value.dtype) */
    cfg->sparse_step = 1;
    memset(cfg->mlp_only, 0, sizeof cfg->mlp_only);
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, false, &cfg->tie_embeddings, NULL));
    if (cfg->top_k > cfg->n_experts)
        return rc_errorf(RC_ERR_FORMAT, "%s: num_experts_per_tok %lld exceeds the %lld experts", path,
                         (long long)cfg->top_k, (long long)cfg->n_experts);
    /* sliding windows: sliding_window (null: none) and layer_types (absent: layer i sliding when (i + 1) % 2) */
    RC_TRY(rc_json_get_int(root, "sliding_window", path, 1, INT64_MAX, 128, &cfg->sliding_window, &present));
    if (!present && json_object_get(root, "sliding_window"))
        cfg->sliding_window = 0;
    RC_TRY(rc_config_parse_layer_types(root, path, cfg, &present));
    if (!present)
        for (int64_t l = 0; l < cfg->n_layers && l < RC_LIM_LAYERS; l++)
            cfg->layer_sliding[l] = (l + 1) % 2 != 0;
    cfg->window_per_layer = true;
    RC_TRY(gpt_oss_rope(root, path, cfg));
    if (cfg->rotary_dim != cfg->head_dim)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: partial_rotary_factor below 1 for gpt_oss (transformers rotates the "
                         "whole head): not supported", path);
    return RC_OK;
}

/* defaults: GptOssConfig's */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, false, 201088, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, false, 2880, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, false, 36, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, false, 64, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, false, 2880, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 131072, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    RC_KEY(n_experts, 1, 1 << 16, false, 128, "num_local_experts", "num_experts"),
    RC_KEY(top_k, 1, 1 << 16, false, 4, "num_experts_per_tok"),
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
    {RC_LW_b_o, "self_attn.o_proj.bias", RC_DIM_H, RC_DIM_1, RC_IF_O_BIAS, false, NULL},
    {RC_LW_sinks, "self_attn.sinks", RC_DIM_NH, RC_DIM_1, RC_IF_SINKS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_expert_spec k_experts = {
    .router = "mlp.router.weight",
    .router_fused = "mlp.router.weight",
    .fused_gate_up = "mlp.experts.gate_up_proj",
    .fused_down = "mlp.experts.down_proj",
    .fused_transposed_interleaved = true,
    .router_bias = "mlp.router.bias",
    .fused_gate_up_bias = "mlp.experts.gate_up_proj_bias",
    .fused_down_bias = "mlp.experts.down_proj_bias",
};

const rc_arch rc_arch_gpt_oss = {
    .family = "gpt_oss",
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
    .parse_config = gpt_oss_parse,
    .experts = &k_experts,
};
