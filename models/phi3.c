/* Phi-3 family (Phi-3, Phi-3.5, Phi-4-mini): transformers' Phi3ForCausalLM
 * (models/phi3/modeling_phi3.py).
 *
 * Llama's forward pass (the same RMSNorm, cos / sin cast to the dtype, eager
 * attention), with these differences (docs/numerics.md "Phi-3"):
 *  - q, k and v come from one fused qkv_proj ([Q; K; V] rows, no bias): the
 *    w_qkv field as stored;
 *  - gate and up come from one fused gate_up_proj, gate rows then up rows
 *    (gate, up = chunk(2)): the two halves of one tensor, used in place;
 *  - partial rotary: the first int(head_dim * partial_rotary_factor) dims of
 *    each head rotate (Phi-4-mini: 0.75), rotate_half over those dims;
 *  - longrope scaling: inv_freq = 1 / (short_factor[j] * base ** (2j / dim)),
 *    cos and sin times the attention factor (sqrt(1 + ln(factor) /
 *    ln(original_max_position_embeddings)), factor = max_position_embeddings /
 *    original when not given); rope_scaling type "su" or "yarn" is longrope in
 *    Phi3Config; positions past original_max_position_embeddings (long_factor)
 *    are refused by rc_config_check_positions; other scaling types are refused
 *    as Phi3Config.validate_rope refuses them;
 *  - sliding_window (Phi-3-mini: 2047), when set, on every layer (Mistral's rule).
 * config.json (Phi3Config defaults where a key is absent): num_key_value_heads
 *   (null or absent: num_attention_heads), head_dim (an explicit key is read, as
 *   getattr does; else hidden_size / num_attention_heads), rms_norm_eps (1e-5),
 *   hidden_act (silu), max_position_embeddings (4096),
 *   original_max_position_embeddings (4096; it wins over the scaling object's),
 *   tie_word_embeddings (false), bos_token_id (1), eos_token_id (32000),
 *   sliding_window (null), rope_theta (10000), partial_rotary_factor (1).
 * Tensors (optional "model." prefix on everything but lm_head):
 *   embed_tokens, norm, lm_head (untied); per layer input_layernorm,
 *   post_attention_layernorm [H], self_attn.qkv_proj [(nh + 2 nkv) d, H],
 *   self_attn.o_proj [H, nh d], mlp.gate_up_proj [2 I, H], mlp.down_proj [H, I]. */
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_types[] = {"phi3", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

/* the scaling object Phi3Config reads: rope_scaling wins over rope_parameters
 * (convert_rope_params_to_dict: rope_scaling or rope_parameters) */
static json_t *scaling_object(json_t *root, const char **key)
{
    json_t *rs = json_object_get(root, "rope_scaling"), *rp = json_object_get(root, "rope_parameters");
    *key = json_is_object(rs) ? "rope_scaling" : "rope_parameters";
    return json_is_object(rs) ? rs : json_is_object(rp) ? rp : NULL;
}

static rc_status phi3_rope(const json_t *root, const char *path, rc_config *cfg)
{
    /* a copy of config.json as Phi3Config standardises it: the top-level
     * original_max_position_embeddings (default 4096) in force, and the
     * legacy scaling names "su" and "yarn" meaning longrope */
    json_t *r = json_deep_copy(root);
    if (!r)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    rc_status s = RC_OK;
    const json_t *om = json_object_get(r, "original_max_position_embeddings");
    if ((!om || json_is_null(om)) && json_object_set_new(r, "original_max_position_embeddings", json_integer(4096)))
        s = rc_errorf(RC_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *sc = s == RC_OK ? scaling_object(r, &key) : NULL;
    if (sc) {
        const json_t *t = json_object_get(sc, "rope_type");
        if (!json_is_string(t))
            t = json_object_get(sc, "type");
        const char *type = json_is_string(t) ? json_string_value(t) : "default";
        if (strcmp(type, "su") == 0 || strcmp(type, "yarn") == 0 || strcmp(type, "longrope") == 0) {
            if (json_object_set_new(sc, "rope_type", json_string("longrope")))
                s = rc_errorf(RC_ERR_NOMEM, "out of memory");
        } else if (strcmp(type, "default") != 0) {
            s = rc_errorf(RC_ERR_UNSUPPORTED, "%s: %s type \"%.32s\" is not supported for phi3 (transformers' "
                          "Phi3Config accepts default and longrope, and su / yarn as longrope)", path, key, type);
        }
        if (s == RC_OK && strcmp(key, "rope_scaling") == 0) { /* rope_scaling wins: read it as rope_parameters */
            json_t *theta = json_object_get(sc, "rope_theta");
            if (!theta) {
                const json_t *tv = json_object_get(r, "rope_theta");
                if (tv && json_object_set(sc, "rope_theta", (json_t *)tv))
                    s = rc_errorf(RC_ERR_NOMEM, "out of memory");
            }
            if (s == RC_OK && json_object_set(r, "rope_parameters", sc))
                s = rc_errorf(RC_ERR_NOMEM, "out of memory");
        }
    }
    if (s == RC_OK)
        s = rc_config_parse_rope(r, path, cfg, 10000.0, 1.0, NULL, NULL);
    json_decref(r);
    return s;
}

static rc_status phi3_parse(const json_t *root, const char *path, rc_config *cfg)
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
    cfg->qkv_bias = cfg->o_bias = cfg->mlp_bias = false; /* Phi3Attention / Phi3MLP: bias=False */
    if (!json_object_get(root, "eos_token_id")) /* Phi3Config's default; an explicit null stays none */
        cfg->eos_ids[cfg->n_eos++] = 32000;
    RC_TRY(rc_json_get_int(root, "sliding_window", path, 1, INT64_MAX, 0, &cfg->sliding_window, NULL));
    return phi3_rope(root, path, cfg);
}

/* Integer keys, read in this order (then eos_token_id, then phi3_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 4096, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, 1, "bos_token_id"),
    {{NULL}, 0, 0, 0, false, 0},
};

static const rc_tensor_spec k_model_tensors[] = {
    RC_LLAMA_MODEL_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_tensor_spec k_layer_tensors[] = {
    {RC_LW_ln1_w, "input_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_qkv, "self_attn.qkv_proj.weight", RC_DIM_QKV, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_Q, RC_ALWAYS, false, NULL},
    {RC_LW_w_gate, "mlp.gate_up_proj.weight", RC_DIM_I, RC_DIM_H, RC_ALWAYS, RC_PIECE_HALF0, NULL},
    {RC_LW_w_up, "mlp.gate_up_proj.weight", RC_DIM_I, RC_DIM_H, RC_ALWAYS, RC_PIECE_HALF1, NULL},
    {RC_LW_w_down, "mlp.down_proj.weight", RC_DIM_H, RC_DIM_I, RC_ALWAYS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_phi3 = {
    .family = "phi3",
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
    .parse_config = phi3_parse,
};
