/* Qwen3 family: transformers' Qwen3ForCausalLM (models/qwen3/modeling_qwen3.py).
 *
 * Llama's forward pass with two differences (docs/numerics.md "Qwen3"):
 *  - q_norm / k_norm: an RMSNorm over head_dim of every q and k head (one
 *    [head_dim] weight each, shared by the heads), right after the projection
 *    and before RoPE, in Llama's RMSNorm arithmetic;
 *  - layer_types: sliding-window layers ("sliding_attention", keys within
 *    sliding_window of the query) among full ones. Without layer_types,
 *    Qwen3Config makes layer i sliding when use_sliding_window is true and
 *    i >= max_window_layers; sliding_window itself is None (no window) unless
 *    use_sliding_window.
 * config.json (Qwen3Config defaults where a key is absent): head_dim (128),
 *   num_key_value_heads (32; null: num_attention_heads), rms_norm_eps (1e-6),
 *   hidden_act (silu), attention_bias (false: q/k/v and o_proj), max_position_embeddings
 *   (32768), tie_word_embeddings (false), rope (default theta 10000; linear,
 *   llama3, yarn), use_sliding_window (false), sliding_window (4096),
 *   max_window_layers (28), layer_types.
 * Tensors (optional "model." prefix on everything but lm_head): Llama's, plus
 *   layers.{i}.self_attn.q_norm.weight [head_dim]
 *   layers.{i}.self_attn.k_norm.weight [head_dim] */
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_types[] = {"qwen3", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

static rc_status qwen3_parse(const json_t *root, const char *path, rc_config *cfg)
{
    bool present;
    const json_t *kv = json_object_get(root, "num_key_value_heads");
    if (kv && json_is_null(kv)) /* Qwen3Config.__post_init__: None -> num_attention_heads */
        cfg->n_kv_heads = cfg->n_heads;
    else
        RC_TRY(rc_json_get_int(root, "num_key_value_heads", path, 1, RC_LIM_HEADS, 32, &cfg->n_kv_heads, NULL));
    RC_TRY(rc_json_get_int(root, "head_dim", path, 1, RC_LIM_HEAD_DIM, 128, &cfg->head_dim, NULL));
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_act", path, "silu", &act, NULL));
    if (strcmp(act, "silu") != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: hidden_act \"%.32s\" is not supported for %s (supported: silu)",
                         path, act, cfg->model_type);
    cfg->act = RC_ACT_SILU;
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-6, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, false, &cfg->tie_embeddings, NULL));
    bool ab;
    RC_TRY(rc_json_get_bool(root, "attention_bias", path, false, &ab, NULL));
    cfg->qkv_bias = cfg->o_bias = ab; /* Qwen3Attention: q/k/v and o_proj all bias=attention_bias */
    cfg->mlp_bias = false;
    cfg->qk_norm = RC_QK_NORM_HEAD;
    /* sliding windows */
    bool sw;
    int64_t mwl;
    RC_TRY(rc_json_get_bool(root, "use_sliding_window", path, false, &sw, NULL));
    RC_TRY(rc_json_get_int(root, "sliding_window", path, 1, INT64_MAX, 4096, &cfg->sliding_window, &present));
    if (!sw || (!present && json_object_get(root, "sliding_window"))) /* None: not used, or null */
        cfg->sliding_window = 0;
    RC_TRY(rc_json_get_int(root, "max_window_layers", path, 0, INT64_MAX, 28, &mwl, NULL));
    RC_TRY(rc_config_parse_layer_types(root, path, cfg, &present));
    if (!present)
        for (int64_t l = 0; l < cfg->n_layers; l++)
            cfg->layer_sliding[l] = cfg->sliding_window > 0 && l >= mwl;
    cfg->window_per_layer = true;
    RC_TRY(rc_config_parse_rope(root, path, cfg, 10000.0, 1.0, NULL, NULL));
    if (cfg->rotary_dim != cfg->head_dim)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: partial_rotary_factor below 1 for %s (transformers' Qwen3 "
                         "rotates the whole head): not supported", path, cfg->model_type);
    return RC_OK;
}

/* Integer keys, read in this order (then eos_token_id, then qwen3_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 32768, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
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
    RC_LLAMA_QK_NORM_TENSORS,
    {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_Q, RC_ALWAYS, false, NULL},
    {RC_LW_b_o, "self_attn.o_proj.bias", RC_DIM_H, RC_DIM_1, RC_IF_O_BIAS, false, NULL},
    RC_LLAMA_MLP_TENSORS(RC_ALWAYS),
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_qwen3 = {
    .family = "qwen3",
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
    .parse_config = qwen3_parse,
};
