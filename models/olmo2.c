/* OLMo 2 family: transformers' Olmo2ForCausalLM (models/olmo2/modeling_olmo2.py).
 *
 * Llama's forward pass with three differences (docs/numerics.md "Later families"):
 *  - norms after the sublayers, none before: x = x + post_attention_layernorm(attn(x)),
 *    x = x + post_feedforward_layernorm(mlp(x)) (rc_config.post_norm; the two norms are
 *    the layer's ln1 / ln2);
 *  - q_norm / k_norm over the whole q and k projections ([n_heads * head_dim] and
 *    [n_kv_heads * head_dim] weights), before RoPE;
 *  - Olmo2RMSNorm multiplies the weight in fp32 and rounds once:
 *    (weight * x * rsqrt(mean x^2 + eps)).to(dtype) (rc_config.norm_w_f32), for every
 *    norm (the layers', q / k, the final one);
 *  - RoPE in fp32: cos / sin stay fp32 and (q * cos + rotate_half(q) * sin) is rounded
 *    once (rc_config.rope_f32, as Baichuan2-7B).
 * config.json (Olmo2Config defaults where a key is absent): num_key_value_heads (null or
 *   absent: num_attention_heads), head_dim (an explicit key is read, as getattr does;
 *   else hidden_size / num_attention_heads), rms_norm_eps (1e-5), hidden_act (silu),
 *   attention_bias (false: q/k/v and o_proj), max_position_embeddings (2048),
 *   tie_word_embeddings (false), rope (default theta 10000; linear, llama3, yarn).
 * Tensors (optional "model." prefix on everything but lm_head): Llama's attention and MLP,
 *   layers.{i}.post_attention_layernorm.weight   [H]
 *   layers.{i}.post_feedforward_layernorm.weight [H]
 *   layers.{i}.self_attn.q_norm.weight           [n_heads * head_dim]
 *   layers.{i}.self_attn.k_norm.weight           [n_kv_heads * head_dim] */
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_types[] = {"olmo2", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

/* the keys OLMo 2 and OLMo 3 read alike (heads, head_dim, activation, norm
 * eps, tying, attention bias) and their post-norm / whole-projection q/k
 * norm layout */
rc_status rc_olmo2_parse_common(const json_t *root, const char *path, rc_config *cfg)
{
    bool present;
    RC_TRY(rc_json_get_int(root, "num_key_value_heads", path, 1, RC_LIM_HEADS, cfg->n_heads, &cfg->n_kv_heads,
                           NULL));
    RC_TRY(rc_json_get_int(root, "head_dim", path, 1, RC_LIM_HEAD_DIM, 0, &cfg->head_dim, &present));
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
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-5, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, false, &cfg->tie_embeddings, NULL));
    bool ab;
    RC_TRY(rc_json_get_bool(root, "attention_bias", path, false, &ab, NULL));
    cfg->qkv_bias = cfg->o_bias = ab;
    cfg->mlp_bias = false;
    cfg->qk_norm = RC_QK_NORM_ALL;
    cfg->post_norm = true;
    cfg->norm_w_f32 = true;
    return RC_OK;
}

static rc_status olmo2_parse(const json_t *root, const char *path, rc_config *cfg)
{
    RC_TRY(rc_olmo2_parse_common(root, path, cfg));
    /* Olmo2RotaryEmbedding returns fp32 cos / sin (no cast to x's dtype) and
     * apply_rotary_pos_emb casts the fp32 result back once: Baichuan2-7B's rule */
    cfg->rope_f32 = true;
    RC_TRY(rc_config_parse_rope(root, path, cfg, 10000.0, 1.0, NULL, NULL));
    if (cfg->rotary_dim != cfg->head_dim)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: partial_rotary_factor below 1 for %s (transformers' OLMo2 "
                         "rotates the whole head): not supported", path, cfg->model_type);
    return RC_OK;
}

/* Integer keys, read in this order (then eos_token_id, then olmo2_parse; OLMo 3 reads the same). */
const rc_config_key rc_olmo2_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 2048, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    {{NULL}, 0, 0, 0, false, 0},
};

const rc_tensor_spec rc_olmo2_model_tensors[] = {
    RC_LLAMA_MODEL_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

/* ln1 / ln2 hold the post-sublayer norms (post_norm); OLMo 3 reads the same tensors */
const rc_tensor_spec rc_olmo2_layer_tensors[] = {
    {RC_LW_ln1_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_w, "post_feedforward_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    RC_LLAMA_QKV_TENSORS,
    RC_LLAMA_QK_NORM_TENSORS,
    {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_Q, RC_ALWAYS, false, NULL},
    {RC_LW_b_o, "self_attn.o_proj.bias", RC_DIM_H, RC_DIM_1, RC_IF_O_BIAS, false, NULL},
    RC_LLAMA_MLP_TENSORS(RC_ALWAYS),
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_olmo2 = {
    .family = "olmo2",
    .model_types = k_types,
    .keys = rc_olmo2_keys,
    .forward = {.norm = RC_NORM_RMS,
                .norm_bias = false,
                .residual = RC_RESIDUAL_SEQUENTIAL,
                .pos = RC_POS_ROTARY,
                .mlp = RC_MLP_GATED,
                .act = RC_ACT_SILU,
                .head = RC_HEAD_UNTIED},
    .prefixes = k_prefixes,
    .layer_stem = "layers.",
    .model_tensors = rc_olmo2_model_tensors,
    .layer_tensors = rc_olmo2_layer_tensors,
    .parse_config = olmo2_parse,
};
