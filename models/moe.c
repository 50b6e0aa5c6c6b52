/* Mixture-of-experts families: transformers' Qwen2MoeForCausalLM,
 * MixtralForCausalLM and Qwen3MoeForCausalLM. Attention, norms, RoPE and the
 * dense MLP are the Llama family's (models/llama.c; Qwen3-MoE's attention is
 * Qwen3's, models/qwen3.c: q_norm / k_norm over each head before RoPE); what differs is the MLP of a MoE layer (the
 * router, the experts and Qwen2-MoE's shared expert), run by the MoE op
 * (src/engine/moe.c, docs/numerics.md "Mixture of experts").
 *
 * config.json (besides the Llama keys): num_experts (qwen2_moe) /
 *   num_local_experts (mixtral), num_experts_per_tok, moe_intermediate_size
 *   (qwen2_moe; mixtral: intermediate_size is each expert's),
 *   shared_expert_intermediate_size, norm_topk_prob (qwen2_moe, default
 *   false; mixtral always renormalises), decoder_sparse_step and
 *   mlp_only_layers (qwen2_moe), qkv_bias (qwen2_moe, default true),
 *   sliding_window (mixtral, default none); qwen3_moe: qwen2_moe's keys but no
 *   shared expert, attention_bias (default false), head_dim (else hidden_size /
 *   num_attention_heads), use_sliding_window (true is refused).
 * Tensors of a MoE layer (after "model.layers.{i}."):
 *   mlp.gate.weight                          [E, H]  (mixtral: block_sparse_moe.gate.weight)
 *   mlp.experts.{e}.gate_proj.weight         [Im, H] (mixtral: block_sparse_moe.experts.{e}.w1.weight)
 *   mlp.experts.{e}.up_proj.weight           [Im, H] (mixtral: w3)
 *   mlp.experts.{e}.down_proj.weight         [H, Im] (mixtral: w2)
 *   or transformers v5's fused mlp.experts.gate_up_proj [E, 2 Im, H] and
 *   mlp.experts.down_proj [E, H, Im] (mixtral too, with mlp.gate.weight)
 *   mlp.shared_expert.{gate,up,down}_proj.weight, mlp.shared_expert_gate.weight [1, H] (qwen2_moe)
 *   self_attn.q_norm.weight, self_attn.k_norm.weight [head_dim] (qwen3_moe)
 * A dense layer (mlp_only_layers, decoder_sparse_step) has Llama's mlp.*_proj. */
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_prefixes[] = {"model.", "", NULL};


/* the Llama keys both families share: GQA, head_dim, silu, eps, tied head, rope */
static rc_status moe_parse_common(const json_t *root, const char *path, rc_config *cfg, int64_t kv_default)
{
    bool present;
    RC_TRY(rc_json_get_int(root, "num_key_value_heads", path, 1, cfg->n_heads, kv_default, &cfg->n_kv_heads,
                           NULL));
    RC_TRY(rc_json_get_int(root, "head_dim", path, 1, 4096, 0, &cfg->head_dim, &present));
    if (!present) {
        if (cfg->hidden % cfg->n_heads != 0)
            return rc_errorf(RC_ERR_FORMAT,
                             "%s: hidden_size %lld is not a multiple of num_attention_heads %lld "
                             "(and head_dim is not given)",
                             path, (long long)cfg->hidden, (long long)cfg->n_heads);
        cfg->head_dim = cfg->hidden / cfg->n_heads;
    }
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_act", path, "silu", &act, NULL));
    if (strcmp(act, "silu") != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: hidden_act \"%.32s\" is not supported for %s (supported: silu)",
                         path, act, cfg->model_type);
    cfg->act = RC_ACT_SILU;
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, cfg->tie_embeddings, &cfg->tie_embeddings, NULL));
    if (cfg->top_k > cfg->n_experts)
        return rc_errorf(RC_ERR_FORMAT, "%s: num_experts_per_tok %lld exceeds the %lld experts", path,
                         (long long)cfg->top_k, (long long)cfg->n_experts);
    return rc_config_parse_rope(root, path, cfg, 10000.0, 1.0, NULL, NULL);
}

static rc_status qwen2_moe_parse(const json_t *root, const char *path, rc_config *cfg)
{
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-6, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "qkv_bias", path, true, &cfg->qkv_bias, NULL));
    cfg->o_bias = cfg->mlp_bias = false;
    bool sw;
    RC_TRY(rc_json_get_bool(root, "use_sliding_window", path, false, &sw, NULL));
    if (sw)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: %s use_sliding_window = true is not supported", path,
                         cfg->model_type);
    RC_TRY(rc_json_get_bool(root, "norm_topk_prob", path, false, &cfg->norm_topk_prob, NULL));
    cfg->moe_weights_f32 = false; /* router_top_value.to(router_logits.dtype) */
    RC_TRY(rc_parse_mlp_only(root, path, cfg));
    return moe_parse_common(root, path, cfg, cfg->n_heads); /* absent: no GQA (Qwen2MoeConfig says 16; published configs give it) */
}

static rc_status qwen3_moe_parse(const json_t *root, const char *path, rc_config *cfg)
{
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-6, &cfg->norm_eps));
    bool ab, sw;
    RC_TRY(rc_json_get_bool(root, "attention_bias", path, false, &ab, NULL));
    cfg->qkv_bias = cfg->o_bias = ab; /* Qwen3MoeAttention: q/k/v and o_proj bias=attention_bias */
    cfg->mlp_bias = false;
    cfg->qk_norm = RC_QK_NORM_HEAD;   /* q_norm / k_norm over head_dim, before RoPE */
    RC_TRY(rc_json_get_bool(root, "use_sliding_window", path, false, &sw, NULL));
    if (sw)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: %s use_sliding_window = true is not supported", path,
                         cfg->model_type);
    RC_TRY(rc_json_get_bool(root, "norm_topk_prob", path, false, &cfg->norm_topk_prob, NULL));
    cfg->moe_weights_f32 = false;
    cfg->shared_intermediate = 0;
    RC_TRY(rc_parse_mlp_only(root, path, cfg));
    RC_TRY(moe_parse_common(root, path, cfg, cfg->n_heads < 4 ? cfg->n_heads : 4)); /* Qwen3MoeConfig: 4 */
    if (cfg->rotary_dim != cfg->head_dim)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: partial_rotary_factor below 1 for %s (transformers rotates the "
                         "whole head): not supported", path, cfg->model_type);
    return RC_OK;
}

static rc_status mixtral_parse(const json_t *root, const char *path, rc_config *cfg)
{
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-5, &cfg->norm_eps));
    cfg->qkv_bias = cfg->o_bias = cfg->mlp_bias = false;
    RC_TRY(rc_json_get_int(root, "sliding_window", path, 1, INT64_MAX, 0, &cfg->sliding_window, NULL));
    cfg->moe_intermediate = cfg->intermediate; /* every layer is MoE: intermediate_size is the experts' */
    cfg->shared_intermediate = 0;
    cfg->norm_topk_prob = true;   /* router_top_value /= sum, always */
    cfg->moe_weights_f32 = true;  /* the weights are not cast back: expert output * fp32 weight */
    cfg->sparse_step = 1;
    memset(cfg->mlp_only, 0, sizeof cfg->mlp_only);
    return moe_parse_common(root, path, cfg, cfg->n_heads < 8 ? cfg->n_heads : 8); /* MixtralConfig: 8 */
}

#define MOE_COMMON_KEYS                                                                          \
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),                                       \
        RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),                                \
        RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),                        \
        RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),                        \
        RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size")

/* defaults: Qwen2MoeConfig's */
static const rc_config_key k_qwen2_moe_keys[] = {
    MOE_COMMON_KEYS,
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 32768, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    RC_KEY(n_experts, 1, 1 << 16, false, 60, "num_experts"),
    RC_KEY(top_k, 1, 1 << 16, false, 4, "num_experts_per_tok"),
    RC_KEY(moe_intermediate, 1, RC_LIM_INTER, false, 1408, "moe_intermediate_size"),
    RC_KEY(shared_intermediate, 1, RC_LIM_INTER, false, 5632, "shared_expert_intermediate_size"),
    RC_KEY(sparse_step, 1, RC_LIM_LAYERS, false, 1, "decoder_sparse_step"),
    {{NULL}, 0, 0, 0, false, 0},
};

/* defaults: Qwen3MoeConfig's */
static const rc_config_key k_qwen3_moe_keys[] = {
    MOE_COMMON_KEYS,
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 32768, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    RC_KEY(n_experts, 1, 1 << 16, false, 128, "num_experts", "num_local_experts"), /* v5 writes the second */
    RC_KEY(top_k, 1, 1 << 16, false, 8, "num_experts_per_tok"),
    RC_KEY(moe_intermediate, 1, RC_LIM_INTER, false, 768, "moe_intermediate_size"),
    RC_KEY(sparse_step, 1, RC_LIM_LAYERS, false, 1, "decoder_sparse_step"),
    {{NULL}, 0, 0, 0, false, 0},
};

/* defaults: MixtralConfig's */
static const rc_config_key k_mixtral_keys[] = {
    MOE_COMMON_KEYS,
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 4096 * 32, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, 1, "bos_token_id"),
    RC_KEY(n_experts, 1, 1 << 16, false, 8, "num_local_experts"),
    RC_KEY(top_k, 1, 1 << 16, false, 2, "num_experts_per_tok"),
    {{NULL}, 0, 0, 0, false, 0},
};

static const rc_tensor_spec k_model_tensors[] = {
    RC_LLAMA_MODEL_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

/* attention as Llama's; the dense MLP on dense layers; the shared expert
 * (the experts and the router: rc_expert_spec) */
#define MOE_ATTN_TENSORS                                                                                          \
    {RC_LW_ln1_w, "input_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},                          \
        {RC_LW_ln2_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},             \
        RC_LLAMA_QKV_TENSORS,                                                                                     \
        {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_Q, RC_ALWAYS, false, NULL}

static const rc_tensor_spec k_qwen2_moe_layer[] = {
    MOE_ATTN_TENSORS,
    RC_LLAMA_MLP_TENSORS(RC_IF_DENSE),
    {RC_LW_w_sh_gate, "mlp.shared_expert.gate_proj.weight", RC_DIM_IS, RC_DIM_H, RC_IF_SHARED_EXPERT, false, NULL},
    {RC_LW_w_sh_up, "mlp.shared_expert.up_proj.weight", RC_DIM_IS, RC_DIM_H, RC_IF_SHARED_EXPERT, false, NULL},
    {RC_LW_w_sh_down, "mlp.shared_expert.down_proj.weight", RC_DIM_H, RC_DIM_IS, RC_IF_SHARED_EXPERT, false, NULL},
    {RC_LW_w_sh_sig, "mlp.shared_expert_gate.weight", RC_DIM_1, RC_DIM_H, RC_IF_SHARED_EXPERT, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_tensor_spec k_qwen3_moe_layer[] = {
    MOE_ATTN_TENSORS,
    {RC_LW_b_o, "self_attn.o_proj.bias", RC_DIM_H, RC_DIM_1, RC_IF_O_BIAS, false, NULL},
    RC_LLAMA_QK_NORM_TENSORS,
    RC_LLAMA_MLP_TENSORS(RC_IF_DENSE),
    {0, NULL, 0, 0, 0, false, NULL},
};

/* every Mixtral layer is MoE: no dense MLP tensors */
static const rc_tensor_spec k_mixtral_layer[] = {
    MOE_ATTN_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_expert_spec k_qwen2_moe_experts = {
    .router = "mlp.gate.weight",
    .router_fused = "mlp.gate.weight",
    .per_expert = "mlp.experts.",
    .gate = "gate_proj.weight",
    .up = "up_proj.weight",
    .down = "down_proj.weight",
    .fused_gate_up = "mlp.experts.gate_up_proj",
    .fused_down = "mlp.experts.down_proj",
};

static const rc_expert_spec k_mixtral_experts = {
    .router = "block_sparse_moe.gate.weight",
    .router_fused = "mlp.gate.weight",
    .per_expert = "block_sparse_moe.experts.",
    .gate = "w1.weight",
    .up = "w3.weight",
    .down = "w2.weight",
    .fused_gate_up = "mlp.experts.gate_up_proj",
    .fused_down = "mlp.experts.down_proj",
};

static const char *const k_qwen2_moe_types[] = {"qwen2_moe", NULL};
static const char *const k_mixtral_types[] = {"mixtral", NULL};
static const char *const k_qwen3_moe_types[] = {"qwen3_moe", NULL};

#define MOE_FORWARD                                                                                  \
    {.norm = RC_NORM_RMS, .norm_bias = false, .residual = RC_RESIDUAL_SEQUENTIAL, .pos = RC_POS_ROTARY, \
     .mlp = RC_MLP_GATED, .act = RC_ACT_SILU, .head = RC_HEAD_UNTIED}

const rc_arch rc_arch_qwen2_moe = {
    .family = "qwen2_moe",
    .model_types = k_qwen2_moe_types,
    .keys = k_qwen2_moe_keys,
    .forward = MOE_FORWARD,
    .prefixes = k_prefixes,
    .layer_stem = "layers.",
    .model_tensors = k_model_tensors,
    .layer_tensors = k_qwen2_moe_layer,
    .parse_config = qwen2_moe_parse,
    .experts = &k_qwen2_moe_experts,
};

const rc_arch rc_arch_mixtral = {
    .family = "mixtral",
    .model_types = k_mixtral_types,
    .keys = k_mixtral_keys,
    .forward = MOE_FORWARD,
    .prefixes = k_prefixes,
    .layer_stem = "layers.",
    .model_tensors = k_model_tensors,
    .layer_tensors = k_mixtral_layer,
    .parse_config = mixtral_parse,
    .experts = &k_mixtral_experts,
};

const rc_arch rc_arch_qwen3_moe = {
    .family = "qwen3_moe",
    .model_types = k_qwen3_moe_types,
    .keys = k_qwen3_moe_keys,
    .forward = MOE_FORWARD,
    .prefixes = k_prefixes,
    .layer_stem = "layers.",
    .model_tensors = k_model_tensors,
    .layer_tensors = k_qwen3_moe_layer,
    .parse_config = qwen3_moe_parse,
    .experts = &k_qwen2_moe_experts, /* the same names as Qwen2-MoE's */
};
