/* Llama family: transformers' LlamaForCausalLM, MistralForCausalLM and
 * Qwen2ForCausalLM (same forward pass, different bias and window rules).
 *
 * config.json: rms_norm_eps, hidden_act ("silu"), num_key_value_heads (GQA),
 *   head_dim (explicit, else hidden_size / num_attention_heads), rope_theta,
 *   rope_scaling (none / linear / llama3; also under rope_parameters),
 *   tie_word_embeddings, attention_bias and mlp_bias (llama), sliding_window
 *   (mistral; qwen2 only when use_sliding_window, which we reject).
 * Tensors (optional "model." prefix on everything but lm_head):
 *   embed_tokens.weight                       [V, H]
 *   layers.{i}.input_layernorm.weight         [H]
 *   layers.{i}.self_attn.q_proj.weight        [nh*d, H]   (+ .bias [nh*d])
 *   layers.{i}.self_attn.k_proj.weight        [nkv*d, H]  (+ .bias [nkv*d])
 *   layers.{i}.self_attn.v_proj.weight        [nkv*d, H]  (+ .bias [nkv*d])
 *   layers.{i}.self_attn.o_proj.weight        [H, nh*d]   (+ .bias [H] with attention_bias)
 *   layers.{i}.post_attention_layernorm.weight [H]
 *   layers.{i}.mlp.gate_proj.weight           [I, H]      (+ .bias with mlp_bias)
 *   layers.{i}.mlp.up_proj.weight             [I, H]
 *   layers.{i}.mlp.down_proj.weight           [H, I]
 *   norm.weight                               [H]
 *   lm_head.weight                            [V, H]      (absent when tied)
 * Forward details: RMSNorm (fp32 normalise, cast, multiply weight), rotate-half
 * RoPE over the whole head (partial_rotary_factor if given), SwiGLU, GQA
 * (q head h reads kv head h / (nh / nkv)), sequential residual. */
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_types[] = {"llama", "mistral", "qwen2", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

static rc_status llama_parse(const json_t *root, const char *path, rc_config *cfg)
{
    bool present;
    RC_TRY(rc_json_get_int(root, "num_key_value_heads", path, 1, cfg->n_heads, cfg->n_heads,
                           &cfg->n_kv_heads, NULL));
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
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-6, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, cfg->tie_embeddings, &cfg->tie_embeddings, NULL));
    int64_t tp;
    RC_TRY(rc_json_get_int(root, "pretraining_tp", path, 1, 1024, 1, &tp, NULL));
    if (tp != 1)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: pretraining_tp = %lld is not supported (only 1)", path,
                         (long long)tp);
    if (strcmp(cfg->model_type, "qwen2") == 0) {
        cfg->qkv_bias = true; /* Qwen2Attention: q/k/v bias=True, o_proj bias=False */
        cfg->o_bias = false;
        cfg->mlp_bias = false;
        bool sw;
        RC_TRY(rc_json_get_bool(root, "use_sliding_window", path, false, &sw, NULL));
        if (sw)
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: qwen2 use_sliding_window = true is not supported", path);
    } else {
        bool ab = false, mb = false;
        RC_TRY(rc_json_get_bool(root, "attention_bias", path, false, &ab, NULL));
        RC_TRY(rc_json_get_bool(root, "mlp_bias", path, false, &mb, NULL));
        cfg->qkv_bias = cfg->o_bias = ab;
        cfg->mlp_bias = mb;
        if (strcmp(cfg->model_type, "mistral") == 0) {
            RC_TRY(rc_json_get_int(root, "sliding_window", path, 1, INT64_MAX, 0, &cfg->sliding_window, NULL));
            /* MistralConfig's default is 4096 * 32 */
            RC_TRY(rc_json_get_int(root, "max_position_embeddings", path, 1, 1 << 24, 4096 * 32,
                                   &cfg->max_pos, NULL));
        }
    }
    return rc_config_parse_rope(root, path, cfg, 10000.0, 1.0, NULL, NULL);
}

/* Integer keys, read in this order (then eos_token_id, then llama_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 2048, "max_position_embeddings"), /* mistral: see llama_parse */
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    {{NULL}, 0, 0, 0, false, 0},
};

/* Tensors, in arena order (after the optional "model." prefix). */
static const rc_tensor_spec k_model_tensors[] = {
    RC_LLAMA_MODEL_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

/* q, k and v are read one after the other into the arena: that is the fused
 * [Q; K; V] matrix (append). */
static const rc_tensor_spec k_layer_tensors[] = {
    {RC_LW_ln1_w, "input_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    RC_LLAMA_QKV_TENSORS,
    {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_Q, RC_ALWAYS, false, NULL},
    {RC_LW_b_o, "self_attn.o_proj.bias", RC_DIM_H, RC_DIM_1, RC_IF_O_BIAS, false, NULL},
    RC_LLAMA_MLP_TENSORS(RC_ALWAYS),
    {RC_LW_b_gate, "mlp.gate_proj.bias", RC_DIM_I, RC_DIM_1, RC_IF_MLP_BIAS, false, NULL},
    {RC_LW_b_up, "mlp.up_proj.bias", RC_DIM_I, RC_DIM_1, RC_IF_MLP_BIAS, false, NULL},
    {RC_LW_b_down, "mlp.down_proj.bias", RC_DIM_H, RC_DIM_1, RC_IF_MLP_BIAS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_llama = {
    .family = "llama",
    .model_types = k_types,
    .keys = k_keys,
    /* RMSNorm, sequential residual, rotary, SwiGLU, untied lm_head unless
     * tie_word_embeddings */
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
    .parse_config = llama_parse,
};
