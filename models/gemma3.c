/* Gemma 3 family (text): transformers' Gemma3ForCausalLM (models/gemma3/modeling_gemma3.py,
 * model_type "gemma3_text").
 *
 * Gemma 2's forward pass (models/gemma2.c: (1 + w) RMSNorm in fp32, four norms per layer,
 * the sqrt(hidden) embedding scale rounded to the dtype, gelu_pytorch_tanh, query_pre_attn_scalar)
 * with these differences (docs/numerics.md "Gemma 2 and Gemma 3"):
 *  - q_norm / k_norm: Gemma3RMSNorm ((1 + w), fp32, one rounding) over head_dim of every
 *    q and k head, after the projection and before RoPE;
 *  - two RoPEs: the sliding layers' default RoPE of base rope_local_base_freq (10000),
 *    the full layers' of base rope_theta (1e6) with rope_scaling (linear in the published
 *    models) -- v5 writes them as rope_parameters.sliding_attention / .full_attention;
 *  - layer_types default: every sliding_window_pattern-th layer (6) full, the rest sliding;
 *  - no attention soft-capping (Gemma3Attention does not pass attn_logit_softcapping on,
 *    whatever the config says); final_logit_softcapping (default None) applied when set.
 * config.json (Gemma3TextConfig defaults where a key is absent): num_key_value_heads (4),
 *   head_dim (256), hidden_activation, rms_norm_eps (1e-6), max_position_embeddings
 *   (131072), tie_word_embeddings (true), attention_bias (false), query_pre_attn_scalar
 *   (256), sliding_window (4096), layer_types / sliding_window_pattern, rope_parameters or
 *   rope_theta / rope_local_base_freq / rope_scaling.
 * Tensors (optional "model." prefix on everything but lm_head): Gemma 2's, plus
 *   layers.{i}.self_attn.q_norm.weight [head_dim]
 *   layers.{i}.self_attn.k_norm.weight [head_dim] */
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_types[] = {"gemma3_text", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

/* the two RoPEs: rope_parameters {"full_attention": {...}, "sliding_attention": {...}}
 * (transformers v5), else the flat keys (rope_theta, rope_scaling for the full layers,
 * rope_local_base_freq) of the published configs */
static rc_status gemma3_rope(const json_t *root, const char *path, rc_config *cfg)
{
    const json_t *rp = json_object_get(root, "rope_parameters");
    const json_t *full = NULL, *slide = NULL;
    const bool nested = json_is_object(rp) && (json_object_get(rp, "full_attention") ||
                                               json_object_get(rp, "sliding_attention"));
    double local;
    RC_TRY(rc_json_get_num(root, "rope_local_base_freq", path, 1e-6, 1e30, 10000.0, &local, NULL));
    if (nested) {
        full = json_object_get(rp, "full_attention");
        slide = json_object_get(rp, "sliding_attention");
        if ((full && !json_is_null(full) && !json_is_object(full)) ||
            (slide && !json_is_null(slide) && !json_is_object(slide)))
            return rc_errorf(RC_ERR_FORMAT, "%s: rope_parameters.full_attention / .sliding_attention must be "
                             "objects", path);
        json_t *tmp = json_object();
        if (!tmp)
            return rc_errorf(RC_ERR_NOMEM, "out of memory");
        if (json_object_get(root, "rope_theta"))
            json_object_set(tmp, "rope_theta", json_object_get(root, "rope_theta"));
        if (json_is_object(full))
            json_object_set(tmp, "rope_parameters", (json_t *)full);
        rc_status s = rc_config_parse_rope(tmp, path, cfg, 1000000.0, 1.0, NULL, NULL);
        json_decref(tmp);
        RC_TRY(s);
        if (json_is_object(slide)) {
            const char *type;
            bool present;
            RC_TRY(rc_json_get_str(slide, "rope_type", path, "default", &type, &present));
            if (strcmp(type, "default") != 0)
                return rc_errorf(RC_ERR_UNSUPPORTED, "%s: rope_parameters.sliding_attention rope_type \"%.32s\" is "
                                 "not supported for %s (default only)", path, type, cfg->model_type);
            RC_TRY(rc_json_get_num(slide, "rope_theta", path, 1e-6, 1e30, local, &local, NULL));
            double prf;
            RC_TRY(rc_json_get_num(slide, "partial_rotary_factor", path, 0.0, 1.0, 1.0, &prf, NULL));
            if (prf != 1.0)
                return rc_errorf(RC_ERR_UNSUPPORTED, "%s: partial_rotary_factor below 1 for %s: not supported",
                                 path, cfg->model_type);
        }
    } else {
        RC_TRY(rc_config_parse_rope(root, path, cfg, 1000000.0, 1.0, NULL, NULL));
    }
    cfg->rope_theta_local = local;
    if (cfg->rotary_dim != cfg->head_dim)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: partial_rotary_factor below 1 for %s (transformers' Gemma 3 "
                         "rotates the whole head): not supported", path, cfg->model_type);
    return RC_OK;
}

static rc_status gemma3_parse(const json_t *root, const char *path, rc_config *cfg)
{
    static const rc_gemma_defaults d = {.n_kv_heads = 4, .final_softcap = 0.0, .attn_softcap_read = false,
                                        .pattern = 6, .pattern_key = "sliding_window_pattern"};
    RC_TRY(rc_gemma_parse(root, path, cfg, &d));
    cfg->qk_norm = RC_QK_NORM_HEAD;
    return gemma3_rope(root, path, cfg);
}

/* Integer keys, read in this order (then eos_token_id, then gemma3_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, false, 262208, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 131072, "max_position_embeddings"),
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
    RC_LLAMA_QK_NORM_TENSORS,
    {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_Q, RC_ALWAYS, false, NULL},
    {RC_LW_b_o, "self_attn.o_proj.bias", RC_DIM_H, RC_DIM_1, RC_IF_O_BIAS, false, NULL},
    RC_LLAMA_MLP_TENSORS(RC_ALWAYS),
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_gemma3_text = {
    .family = "gemma3_text",
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
    .parse_config = gemma3_parse,
};
